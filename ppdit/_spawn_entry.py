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
import multiprocessing
import multiprocessing.connection
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


def watch_parent(parent_pid: int, pdeathsig: bool = True, sentinel: int | None = None) -> None:
    """End this process when ``parent_pid`` is gone, within ``PARENT_POLL_S`` seconds. Linux can
    do it for us (``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills the child when the
    *thread* that started it ends, so callers starting ranks from a short-lived thread pass
    ``pdeathsig=False``); a daemon thread polling ``getppid()`` covers the rest. ``sentinel``: a
    file descriptor readable once the caller is gone (the end of the pipe multiprocessing gives
    every child). A forked rank needs it: its parent, the fork server, exits only once no client
    holds its "alive" pipe, and every rank holds one."""
    if _WATCHED:
        return
    _WATCHED.append(parent_pid)
    if pdeathsig:
        die_with_parent()
    threading.Thread(target=_watch, args=(parent_pid, sentinel), name="ppdit-parent-watch",
                     daemon=True).start()


def in_torchrun() -> bool:
    """Whether this process was started by torchrun (or another env:// launcher)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))


def watch_torchrun_agent() -> None:
    """Under torchrun, watch the agent that started this process: called first thing, because
    a rank's imports and model loading take seconds to minutes, and an agent killed meanwhile
    must not leave the rank running with no parent to watch."""
    if in_torchrun():
        watch_parent(os.getppid())


def until_gone(parent_pid: int, sentinel: int | None, poll_s: float) -> None:
    """Return once ``parent_pid`` is no longer this process's parent, or ``sentinel`` (the read
    end of a pipe the caller holds open) is readable: end-of-file, the caller is gone."""
    while os.getppid() == parent_pid:
        if sentinel is None:
            time.sleep(poll_s)
        elif multiprocessing.connection.wait([sentinel], poll_s):
            return


def _watch(parent_pid: int, sentinel: int | None) -> None:
    until_gone(parent_pid, sentinel, PARENT_POLL_S)
    with contextlib.suppress(Exception):
        print("ppdit: the process that started this rank is gone; it exits", flush=True)
    os._exit(3)


def main(parent_pid: int, pdeathsig: bool, payload: bytes, env: dict[str, str],
         *queues) -> None:
    """Die with the parent, then become the rank: ``payload`` unpickles to the rank's entry
    point and its arguments (``runtime.processes.rank.child_main``: unpickling it imports torch).

    ``parent_pid`` is the caller. A spawned rank's parent is the caller itself; a forked one's
    is the fork server (``ppdit.runtime.processes.start``), so the rank watches both its parent
    and the caller's end of multiprocessing's pipe. ``env`` is the caller's environment at
    launch: a forked rank would otherwise keep the one the server started with."""
    # An interrupt meant for the caller (Jupyter signals the kernel's whole process group) must
    # not raise inside a rank's imports: the caller stops the ranks (see pool.py).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if os.environ != env:
        os.environ.clear()
        os.environ.update(env)
    # Cache the bytecode of what this rank imports even where PYTHONDONTWRITEBYTECODE is set
    # (a JupyterLab started by hand on such a machine): every rank start would otherwise
    # recompile torch's and ppdit's modules (8.3 s of imports instead of 3.4 s, measured).
    sys.dont_write_bytecode = False
    if pdeathsig:
        die_with_parent()
    if not _caller_alive(parent_pid):  # it died before the request above took effect
        os._exit(3)
    parent = multiprocessing.parent_process()  # the caller, whatever the start method
    watch_parent(os.getppid(), pdeathsig=False,  # the request, if any, is made above
                 sentinel=parent.sentinel if parent is not None else None)
    child_main, rank, spec, first, log_path = pickle.loads(payload)
    child_main(rank, spec, first, *queues, log_path)


def _caller_alive(parent_pid: int) -> bool:
    """Whether the process that started this rank still runs: it is our parent (spawn), or it
    still holds its end of the pipe multiprocessing handed us (forkserver)."""
    if os.getppid() == parent_pid:
        return True
    parent = multiprocessing.parent_process()
    return parent is not None and parent.pid == parent_pid and parent.is_alive()
