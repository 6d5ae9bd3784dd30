"""How a pool's ranks start: forked from a server that imported torch once, or fresh interpreters.

Why not always ``spawn`` (a fresh interpreter per rank, as ``torchrun`` and ``mp.spawn`` do):
each such rank imports torch, diffusers and transformers itself, about 9 s of one core on this
2-core machine (lesson 01 measures it), at every launch. ``forkserver`` keeps one server process
per caller that imports them once (``ppdit._fork_server``); a rank forked from it is ready in a
fraction of a second, and still imports ppdit itself, so an edit reaches the next launch.

Which is used (``start_method_for``):

* spawn inside ``with fresh_interpreters():`` (lesson 01 reproduces a torchrun's start-up);
* ``$PPDIT_START_METHOD`` ("spawn" or "forkserver") when set;
* otherwise ``forkserver`` for CPU ranks and ``spawn`` for CUDA ranks. A fork cannot use CUDA
  once its parent asked the driver anything, and on an H200 ``import diffusers`` (one of the
  server's imports) calls ``torch.cuda.is_available()``: every forked CUDA rank failed with
  "Cannot re-initialize CUDA in forked subprocess" (gpu_runs/h200-2026-11-28*.json). Spawned,
  two CUDA ranks cost 5.3 s per launch there; a pool pays that once.

A forked rank's parent is the server: ``ppdit._spawn_entry`` gives the rank its caller's
environment and watches the caller; the working directory and ``sys.path`` travel with
multiprocessing's own preparation data, as under spawn.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import os
import sys
from collections.abc import Iterator

import torch.multiprocessing as mp

from ppdit._fork_server import ENV, context

METHODS = ("forkserver", "spawn")
_FRESH: list[bool] = []  # one entry per open fresh_interpreters() block


def start_method_for(kind: str) -> str:
    """The start method for ranks of this placement kind ("cpu", "cuda", "cuda-shared"):
    forkserver for CPU ranks, spawn for CUDA ranks (the module's docstring says why)."""
    if _FRESH:
        return "spawn"
    chosen = os.environ.get(ENV, "").strip()
    if chosen:
        if chosen not in METHODS:
            raise ValueError(f"{ENV}={chosen!r}: the start method must be one of {METHODS}")
        if chosen == "forkserver" and kind != "cpu":
            raise ValueError(f"{ENV}=forkserver with {kind} ranks: a fork cannot use CUDA once "
                             "its server's imports asked the driver; CUDA ranks spawn")
        return chosen
    return "forkserver" if kind == "cpu" else "spawn"


def start_context(kind: str):
    method = start_method_for(kind)
    return context() if method == "forkserver" else mp.get_context(method)


@contextlib.contextmanager
def fresh_interpreters() -> Iterator[None]:
    """Inside the block, ranks start as fresh interpreters (spawn), paying every import."""
    _FRESH.append(True)
    try:
        yield
    finally:
        _FRESH.pop()


def check_main_guard() -> None:
    """Refuse, before any rank starts, a launch from a script's top level outside
    ``if __name__ == "__main__":``: each rank re-runs that script as it starts (spawn and
    forkserver import it as ``__mp_main__``, multiprocessing.spawn's rule below), where the
    launch runs again, multiprocessing refuses it, and the rank dies before it can say why."""
    main = sys.modules["__main__"]
    spec, path = getattr(main, "__spec__", None), getattr(main, "__file__", None)
    if path is None or (spec is not None and spec.name.rpartition(".")[2] == "__main__"):
        return  # no script, or python -m pkg (never re-run)
    path, frame = os.path.abspath(path), sys._getframe(1)
    while frame and (frame.f_code.co_name, os.path.abspath(frame.f_code.co_filename)) != (
            "<module>", path):  # the script's own top level (not a notebook cell's)
        frame = frame.f_back
    if frame and frame.f_lineno not in _guarded_lines(path):
        raise RuntimeError(
            f"{path}:{frame.f_lineno} starts ranks from the script's top level, outside "
            "`if __name__ == \"__main__\":`; each rank re-runs the script's top level as it "
            "starts (multiprocessing imports it as __mp_main__), so move the call under it")


@functools.cache
def _guarded_lines(path: str) -> frozenset[int]:
    """The lines of ``path`` inside an ``if __name__ == "__main__":`` block."""
    guard = ast.dump(ast.parse('__name__ == "__main__"', mode="eval").body)
    return frozenset(line for node in ast.walk(ast.parse(open(path, encoding="utf-8").read()))
                     if isinstance(node, ast.If) and ast.dump(node.test) == guard
                     for line in range(node.lineno, node.end_lineno + 1))
