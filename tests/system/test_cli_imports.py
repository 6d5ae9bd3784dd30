"""``ppdit plan`` and ``ppdit --help`` answer in a fraction of a second because they import
neither torch nor diffusers (torch alone takes ~3 s here): checked in a fresh interpreter,
with what each command's run left in ``sys.modules``."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "diffusers", "transformers")


@pytest.mark.parametrize("argv", [
    ["plan", "--model", "wan2.1-14b", "--gpu", "RTX 4090", "--layout", "ulysses=4,fsdp"],
    ["plan", "--layout", "step=2,ulysses=2"],
    ["--help"],
])
def test_the_planning_commands_import_nothing_heavy(argv):
    code = ("import sys\nfrom ppdit import cli\ntry:\n    cli.main(sys.argv[1:])\n"
            "except SystemExit:\n    pass\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]", out[-2000:]
