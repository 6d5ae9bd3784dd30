"""The fork server ranks start from (standard library only).

A rank is a fork of a server process that imported torch, diffusers and transformers once
(``ppdit.runtime.processes.start`` says why). The server's imports take seconds; started only
when the first rank is needed, they come on top of the caller's own imports. So a caller that
knows it will launch starts it early (``ppdit.runtime.warm()``; ``python -m ppdit`` does for
the commands that start ranks), and its imports run on another core while the caller goes on
importing and building. Nothing starts it on import. This module imports nothing but the
standard library, so the server can start before the caller imports torch itself; the server's
own first import (``_fork_server_guard``) ends it with its caller, even mid-import.
"""

import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import sys

ENV = "PPDIT_START_METHOD"  # "spawn" or "forkserver": overrides processes.start's rule

# The guard first (it must watch the caller before the seconds of imports: _fork_server_guard),
# then what every rank imports from outside ppdit (runtime.processes.rank imports diffusers
# before the process group; the model, the VAE and the text encoder come from these modules).
PRELOAD = ("ppdit._fork_server_guard", "torch", "torch.distributed",
           "torch.distributed._functional_collectives", "torch.distributed.device_mesh",
           "torch._dynamo", "diffusers", "diffusers.models.transformers.transformer_wan",
           "diffusers.models.autoencoders.autoencoder_kl_wan", "transformers",
           "transformers.models.umt5")


def context():
    """The forkserver context, its server set to import ``PRELOAD`` (read when it starts)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


def start_early() -> None:
    """Start the server now (``ppdit.runtime.warm``), unless this process will not fork
    ranks from it; the first launch or pool starts it otherwise."""
    if not _may_fork_ranks():
        return
    context()
    with contextlib.suppress(RuntimeError):  # a child still starting (see _may_fork_ranks)
        multiprocessing.forkserver.ensure_running()


def _may_fork_ranks() -> bool:
    """False for a rank or another child, a torchrun worker and a caller told to spawn.

    A child can get here before multiprocessing calls it one (``parent_process()`` is still
    None): a script's ranks re-run the script's top-level imports as ``__mp_main__`` while
    they start. Its process name is already the child's, and multiprocessing refuses to start
    a process from it (the RuntimeError above), so both mean "not here"."""
    if not sys.platform.startswith("linux") or "RANK" in os.environ:
        return False
    if (multiprocessing.parent_process() is not None
            or multiprocessing.current_process().name != "MainProcess"):
        return False
    return os.environ.get(ENV, "").strip() != "spawn"
