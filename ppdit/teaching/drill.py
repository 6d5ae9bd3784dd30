"""Fire drills: start a real multi-rank run in its own session, signal it, and watch who is left.

What a learner does to a notebook most often is interrupt a cell (SIGINT) or restart the
kernel (SIGTERM, then SIGKILL if the kernel is busy). ``signal_drill`` does the same to a
command line run, from the outside, and reports what happened (``DrillResult``). The tests and
lesson 00 use it; it needs Linux's ``/proc``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

STEP_SPLIT = ("-m", "ppdit", "step-split", "--requests", "400")
MARK = "PPDIT_DRILL"  # an environment variable every process of a drilled run inherits


@dataclass
class DrillResult:
    """What a signal did to a run."""
    signal: str
    ranks_seen: int  # rank processes running when the signal was sent
    ended_s: float  # from the signal until no process of the run was left (or the limit)
    leftovers: list[str]  # "pid cmdline" of processes still there at the limit
    returncode: int | None  # the run's main process (negative: killed by that signal)
    output: str  # what the main process printed (stdout and stderr)

    @property
    def clean(self) -> bool:
        return not self.leftovers


def marked_processes(token: str) -> dict[int, str]:
    """pid -> command line of every live (not zombie) process whose environment carries
    ``PPDIT_DRILL=token``: the run and everything it started, whatever session or process
    group they moved to (torchrun starts each worker in a session of its own)."""
    out, mark = {}, f"{MARK}={token}".encode()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            env = (proc / "environ").read_bytes().split(b"\0")
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
        if state != "Z" and mark in env:
            out[int(proc.name)] = cmd.strip()
    return out


def _ranks(procs: dict[int, str], main_pid: int) -> int:
    """Rank processes: spawned children, children of a fork server (not the server itself:
    forked, they show its command line), or the workers torchrun starts (``python -m ...``)."""
    return sum(("spawn_main" in c or " -m " in c
                or ("forkserver" in c and "forkserver" in procs.get(_ppid(p), "")))
               and "resource_tracker" not in c and "torch.distributed.run" not in c
               for p, c in procs.items() if p != main_pid)


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def signal_drill(sig: signal.Signals, *, command: tuple[str, ...] = STEP_SPLIT, ranks: int = 2,
                 limit_s: float = 10.0, start_limit_s: float = 120.0, busy_s: float = 1.5,
                 cwd: str | Path | None = None, to_group: bool = False,
                 after_s: float | None = None) -> DrillResult:
    """Run ``python *command`` in a new session; once ``ranks`` rank processes run (and have
    had ``busy_s`` to get busy), or ``after_s`` seconds after the start whatever runs by then
    (a caller killed while its server still imports), send ``sig`` to the main process only
    (``to_group=True``: to its whole process group, ranks included, as Jupyter's interrupt
    does); then wait up to ``limit_s`` for every process of the run to end."""
    token = uuid.uuid4().hex
    env = {**os.environ, "PYTHONUNBUFFERED": "1", MARK: token}
    proc = subprocess.Popen([sys.executable, *command], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=cwd)
    try:
        deadline = time.monotonic() + start_limit_s
        while after_s is None and _ranks(marked_processes(token), proc.pid) < ranks:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the run never had {ranks} ranks running:\n"
                                   f"{proc.communicate()[0].decode(errors='replace')}")
            time.sleep(0.1)
        time.sleep(busy_s if after_s is None else after_s)
        seen = _ranks(marked_processes(token), proc.pid)
        start = time.monotonic()
        if to_group:
            os.killpg(proc.pid, sig)  # the new session's group: the main process's pid
        else:
            proc.send_signal(sig)
        left = _wait_empty(proc, token, start + limit_s)
        ended = time.monotonic() - start
        output = _output(proc)
    finally:
        _kill_all(token)
    return DrillResult(sig.name, seen, ended, [f"{p} {c}" for p, c in left.items()],
                       proc.returncode, output)


def _wait_empty(proc: subprocess.Popen, token: str, deadline: float) -> dict[int, str]:
    """Reap the main process as soon as it exits; wait until no process of the run is left."""
    while time.monotonic() < deadline:
        proc.poll()
        left = marked_processes(token)
        if not left:
            return {}
        time.sleep(0.05)
    proc.poll()
    return marked_processes(token)


def _output(proc: subprocess.Popen) -> str:
    """What the main process printed; if it is still running (the drill failed), kill it first
    so the caller gets the leftovers in the result instead of a timeout here."""
    try:
        out = proc.communicate(timeout=5)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        out = proc.communicate()[0]
    return out.decode(errors="replace")


def _kill_all(token: str) -> None:
    """Whatever a failed drill left: SIGKILL it, so one drill never leaks into the next."""
    for pid in marked_processes(token):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
