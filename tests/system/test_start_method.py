"""How ranks start: forked from a server on CPU (seconds of imports saved per launch), fresh
interpreters on request, and a forked rank sees its caller's environment at launch time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ppdit.runtime import launch
from ppdit.runtime.processes.start import ENV, fresh_interpreters, start_method_for
from tests.support import workers


def test_the_rule_and_its_override(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert start_method_for("cpu") == "forkserver"
    assert start_method_for("cuda") == start_method_for("cuda-shared") == "spawn"
    with fresh_interpreters():
        assert start_method_for("cpu") == "spawn"
    assert start_method_for("cpu") == "forkserver"
    monkeypatch.setenv(ENV, "spawn")
    assert start_method_for("cpu") == "spawn"
    monkeypatch.setenv(ENV, "forkserver")
    with pytest.raises(ValueError, match=r"forkserver with cuda ranks: a fork cannot use CUDA"):
        start_method_for("cuda")
    monkeypatch.setenv(ENV, "fork")
    with pytest.raises(ValueError, match=r"PPDIT_START_METHOD='fork'.*forkserver.*spawn"):
        start_method_for("cpu")


def test_a_forked_rank_gets_the_callers_environment_and_folder(monkeypatch, tmp_path,
                                                                no_orphans):
    monkeypatch.delenv(ENV, raising=False)
    launch(workers.how_started, 1, args=("PPDIT_TEST_MARK",), timeout_s=120)  # server runs
    # set after the server started: only the launch itself can carry them to the rank
    monkeypatch.setenv("PPDIT_TEST_MARK", "late")
    monkeypatch.chdir(tmp_path)
    forked = launch(workers.how_started, 2, args=("PPDIT_TEST_MARK",), timeout_s=120)
    with fresh_interpreters():
        spawned = launch(workers.how_started, 1, args=("PPDIT_TEST_MARK",), timeout_s=120)
    me = os.getpid()
    for r in forked:
        assert (r["env"], r["cwd"], r["parent"], r["method"]) == (
            "late", str(tmp_path), me, "forkserver")
        assert r["ppid"] != me  # the fork server's child, not ours
    assert (spawned[0]["env"], spawned[0]["cwd"], spawned[0]["ppid"], spawned[0]["method"]) == (
        "late", str(tmp_path), me, "spawn")


@pytest.mark.parametrize("method, started", [("", True), ("spawn", False)])
def test_importing_starts_nothing_and_warm_starts_the_server_unless_ranks_spawn(method, started):
    code = ("import multiprocessing.forkserver as f, ppdit.runtime, ppdit.viz.timeline; "
            "before = f._forkserver._forkserver_pid is not None; ppdit.runtime.warm(); "
            "print(before, f._forkserver._forkserver_pid is not None)")
    env = {**os.environ, ENV: method, "PPDIT_DEVICE": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == f"False {started}"


def test_a_caller_killed_while_its_server_imports_leaves_nothing():
    """The server's first import watches the caller: killed while the server still imports
    torch, the caller leaves no process behind within a fraction of a second (without the
    guard: once the imports end, 3-5 s later on an idle machine, half a minute under load)."""
    code = ("import multiprocessing.forkserver as f, time, ppdit.runtime; ppdit.runtime.warm(); "
            "print(f._forkserver._forkserver_pid, flush=True); time.sleep(120)")
    env = {**os.environ, "PPDIT_DEVICE": "cpu"}
    env.pop(ENV, None)
    caller = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              text=True)
    server = int(caller.stdout.readline())
    caller.kill()  # the server has just started importing torch and diffusers
    caller.wait()
    deadline = time.monotonic() + 3
    while _running(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(server)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_script_that_imports_the_runtime_at_the_top_launches(tmp_path):
    # its ranks re-run the script's imports while they start: they must not start a server
    script = tmp_path / "script.py"
    script.write_text("from ppdit.runtime import launch\n"
                      "from ppdit.runtime.processes.hello import hello\n\n"
                      "if __name__ == '__main__':\n"
                      "    print(sum(r['all_reduce_sum'] for r in launch(hello, 2)))\n")
    env = {**os.environ, "PPDIT_DEVICE": "cpu"}
    env.pop(ENV, None)
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                         timeout=180, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "6.0"  # 1 + 2 on each of the two ranks


# A CUDA build, simulated on any wheel: the accelerator is CUDA, and ``is_available`` answers as
# a CUDA build's does, through NVML when told to, else through the CUDA runtime, which
# initialises CUDA in the server and poisons every fork of it: the probe records that call.
PROBE = """
import importlib, torch
asked = []
def ask(name):
    return lambda *a, **k: asked.append(name) or 1
def is_available():
    if not torch.cuda._nvml_based_avail():
        asked.append("is_available")
    return True
torch.cuda.is_available = is_available
torch.accelerator.current_accelerator = lambda *a, **k: torch.device("cuda")
for name in ("_lazy_init", "init", "set_device", "device_count", "get_device_capability"):
    setattr(torch.cuda, name, ask(name))
from ppdit._fork_server import PRELOAD
for module in {preload}:
    importlib.import_module(module)
print(sorted(set(asked)) or "none")
"""


def _probe(preload: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"}
    run = subprocess.run([sys.executable, "-c", PROBE.format(preload=preload)], env=env,
                         capture_output=True, text=True, timeout=300, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    return run.stdout.strip().splitlines()[-1]


def test_the_fork_servers_imports_never_initialise_cuda():
    """A rank forked from a server that initialised CUDA (even through ``is_available()``,
    which asks the CUDA runtime unless NVML answers) fails with "Cannot re-initialize CUDA in
    forked subprocess" (issue 50): diffusers and transformers ask at import, so the server's
    first import makes NVML answer. Without that first import the probe sees the call."""
    assert _probe("PRELOAD") == "none"
    assert _probe("PRELOAD[1:]") == "['is_available']"


def test_the_fork_server_ignores_an_interrupt_while_it_imports():
    """Jupyter's interrupt reaches the whole process group: a server still importing (its
    first import is the guard) goes on quietly; the caller decides what stops."""
    code = ("import os, signal, time; import ppdit._fork_server_guard; "
            "os.kill(os.getpid(), signal.SIGINT); time.sleep(0.2); print('still importing')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False, cwd=Path(__file__).resolve().parents[2])
    assert run.stdout.strip() == "still importing" and "KeyboardInterrupt" not in run.stderr


SCRIPT = """from ppdit.runtime import launch
from ppdit.runtime.processes.hello import hello

def main():
    print(sum(r["all_reduce_sum"] for r in launch(hello, 2, timeout_s=120)))

{call}
"""


@pytest.mark.parametrize("guarded", [False, True])
def test_a_script_that_starts_ranks_outside_its_main_guard_is_told_so(tmp_path, guarded):
    # issue 49: every rank re-runs the script's top level as it starts, where the launch fails
    # again; before this check the caller heard only "rank 0 died (exit code 1)"
    call = 'if __name__ == "__main__":\n    main()' if guarded else "main()"
    script = tmp_path / "start.py"
    script.write_text(SCRIPT.format(call=call))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=180, env={**os.environ, "PPDIT_DEVICE": "cpu"})
    if guarded:
        assert (done.returncode, done.stdout.strip()) == (0, "6.0"), done.stderr
        return
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"RuntimeError: {script}:7 starts ranks from the script's top level, outside "
        '`if __name__ == "__main__":`; each rank re-runs the script\'s top level as it starts '
        "(multiprocessing imports it as __mp_main__), so move the call under it")
