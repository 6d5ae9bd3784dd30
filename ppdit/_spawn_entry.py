"""The first code a spawned rank runs: tie the rank's life to its caller before anything heavy.

Why a module of its own, outside ``ppdit.runtime``: a spawned process unpickles its target and
arguments before running anything, importing every module they name, and ``ppdit.runtime``
imports torch (seconds; more on a busy machine). A rank whose caller dies during those seconds
(a kernel restarted right after a launch) would live on until its imports finish. This module
imports nothing heavy, so the rank asks Linux to kill it with its parent first
(``PR_SET_PDEATHSIG``) and only then unpickles its real arguments and imports torch.
"""

import contextlib
import ctypes
import os
import pickle
import signal
import sys
import threading
import time

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent thread ends (elsewhere: nothing)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


PARENT_POLL_S = 0.5  # how often a rank checks that its parent is alive
_WATCHED: list[int] = []  # the parent this process watches (one watcher per process)


def watch_parent(parent_pid: int, pdeathsig: bool = True) -> None:
    """End this process when ``parent_pid`` is gone, within ``PARENT_POLL_S`` seconds.

    Linux can do it for us (``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills the child
    when the *thread* that started it ends, so callers starting ranks from a short-lived
    thread pass ``pdeathsig=False``); a daemon thread polling ``getppid()`` covers the rest.
    """
    if _WATCHED:
        return
    _WATCHED.append(parent_pid)
    if pdeathsig:
        die_with_parent()
    threading.Thread(target=_watch, args=(parent_pid,), name="ppdit-parent-watch",
                     daemon=True).start()


def watch_torchrun_agent() -> None:
    """Under torchrun (its variables set), watch the agent that started this process: called
    first thing, because a rank's imports and model loading take seconds to minutes, and an
    agent killed meanwhile must not leave the rank running with no parent to watch."""
    if all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR")):
        watch_parent(os.getppid())


def _watch(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(PARENT_POLL_S)
    with contextlib.suppress(Exception):
        print(f"ppdit: parent process {parent_pid} is gone; this rank exits", flush=True)
    os._exit(3)


def main(parent_pid: int, pdeathsig: bool, payload: bytes, *queues) -> None:
    """Die with the parent, then become the rank: ``payload`` unpickles to the rank's entry
    point and its arguments (``ppdit.runtime.rank.child_main``: unpickling it imports torch,
    which is why that comes last, and why this module names no ppdit module itself)."""
    # An interrupt meant for the caller (Jupyter signals the kernel's whole process group) must
    # not raise inside a rank's imports: the caller stops the ranks. (A pool started from the
    # main thread starts its ranks with SIGINT ignored already: ppdit.runtime.pool.)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Cache the bytecode of what this rank imports even where PYTHONDONTWRITEBYTECODE is set
    # (a JupyterLab started by hand on such a machine): every rank start would otherwise
    # recompile torch's and ppdit's modules (8.3 s of imports instead of 3.4 s, measured).
    sys.dont_write_bytecode = False
    if pdeathsig:
        die_with_parent()
    if os.getppid() != parent_pid:  # the parent died before the request above took effect
        os._exit(3)
    child_main, rank, spec, first, log_path = pickle.loads(payload)
    child_main(rank, spec, first, *queues, log_path)
