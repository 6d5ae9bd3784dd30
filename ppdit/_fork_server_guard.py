"""The fork server's first import: it ends the server when its caller is gone.

The server imports torch, diffusers and transformers (``_fork_server.PRELOAD``) before it
listens, and multiprocessing's server notices a dead caller only once it listens (its "alive"
pipe reaches end-of-file): a caller killed meanwhile would leave it importing for half a minute,
then idle. Imported first, this module's thread watches the same pipe (its descriptor is on the
server's command line, ``main(listener_fd, alive_r, ...)``) and the server's parent, and exits
the server within ``POLL_S`` of the caller's end (measured: 0.05-0.3 s, where the server alone
took 3-9 s). Forked ranks do not inherit the thread (a fork copies only the forking thread);
each watches its caller itself (``_spawn_entry``, whose loop this shares). It also ignores
SIGINT from the start, as multiprocessing's server does once its imports end: Jupyter's
interrupt reaches the kernel's whole process group, and a server still importing printed a
``KeyboardInterrupt`` traceback at every restart. Standard library only.
"""

import os
import re
import signal
import threading
from pathlib import Path

from ppdit._spawn_entry import until_gone

POLL_S = 0.25


def _alive_fd() -> int | None:
    """The read end of multiprocessing's "alive" pipe, from the server's own command line."""
    try:
        cmd = Path("/proc/self/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return None
    found = re.search(r"forkserver import main; main\((\d+), (\d+),", cmd)
    return int(found.group(2)) if found else None


def _watch(caller: int, alive: int | None) -> None:
    until_gone(caller, alive, POLL_S)
    os._exit(0)


# diffusers and transformers ask whether CUDA is available as they import; answered by the CUDA
# runtime, that initialises CUDA in the server and every fork of it fails to use it ("Cannot
# re-initialize CUDA in forked subprocess"), a CPU rank's compile or probe included (issue 50)
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
threading.Thread(target=_watch, args=(os.getppid(), _alive_fd()), name="ppdit-server-watch",
                 daemon=True).start()
signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller decides (see the module)
