"""The fork server's first import: it ends the server when its caller is gone.

The server imports torch, diffusers and transformers (``_fork_server.PRELOAD``) before it
listens to anyone, and multiprocessing's server notices a dead caller only once it listens
(its "alive" pipe closes). A caller killed during those seconds would leave the server
importing for half a minute, then idle. Imported first, this module starts a thread that polls
the server's parent and exits the server within ``POLL_S`` of the caller's end, imports or not.
Forked ranks do not inherit the thread (a fork copies only the forking thread); each rank
watches its caller itself (``_spawn_entry``). Standard library only.
"""

import os
import threading
import time

POLL_S = 0.25


def _watch(caller: int) -> None:
    while os.getppid() == caller:
        time.sleep(POLL_S)
    os._exit(0)


threading.Thread(target=_watch, args=(os.getppid(),), name="ppdit-server-watch",
                 daemon=True).start()
