"""The lanes hold: a unit test cannot start a process or a rank, and every test file lives in
a lane's folder (``tests/conftest.py`` sets each test's marks from it)."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys

import pytest

from tests.conftest import LANES, ROOT, lane_of

TESTS = ROOT / "tests"


def test_a_unit_test_cannot_start_a_process_or_a_rank():
    from ppdit.runtime import launch
    from ppdit.runtime.processes.hello import hello

    with pytest.raises(RuntimeError, match="a unit test started a process: move it"):
        multiprocessing.get_context("spawn").Process(target=print).start()
    with pytest.raises(RuntimeError, match="a unit test started a subprocess"):
        subprocess.run([sys.executable, "-c", "pass"])
    with pytest.raises(RuntimeError, match="a unit test started a"):
        launch(hello, 1, timeout_s=30)


def test_every_test_file_is_in_a_lane():
    files = sorted(p for p in TESTS.rglob("test_*.py") if "support" not in p.parts)
    assert files and {lane_of(p) for p in files} == set(LANES)
    assert not list(TESTS.glob("test_*.py"))  # none left at the top
