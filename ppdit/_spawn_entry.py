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

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent thread ends (elsewhere: nothing)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


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
