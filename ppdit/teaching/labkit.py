"""Helpers for the labs: load a student's file (or the reference solution) as an importable
module, so the checkers can run its functions — also inside spawned ranks, which import
workers by module name — and run a pipeline's ranks one after another in one process, so a
checker can try plans that real ranks would never be given (``run_ranks_in_order``)."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import random
import sys
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any
from unittest import mock

import torch

from ppdit.runtime.comm.wire import Wire
from ppdit.runtime.device import torch_threads


def load_module(path: str | Path) -> ModuleType:
    """Import the Python file at ``path`` under its own stem, with its folder on ``sys.path``
    (spawned ranks inherit ``sys.path`` and re-import the module by that name)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no lab file at {path}")
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def lab_implementation(default: str | Path) -> ModuleType:
    """The file a checker grades: ``$PPDIT_LAB_IMPL`` if set (CI points it at a solution), else
    the student's stub next to the checker."""
    return load_module(os.environ.get("PPDIT_LAB_IMPL", default))


class LoopbackMailbox:
    """Point-to-point messages between ranks that run one after another in this process: a
    stand-in for ``send_tensor`` / ``recv_tensor`` when every message flows from a lower rank
    to a higher one (a step-split pipeline). Rank 0 runs to the end, its sends wait in a FIFO
    per (source, destination) pair, then rank 1 runs and reads them, and so on, so each rank
    can be handed a *different* plan. No process starts, so it costs nothing."""

    def __init__(self) -> None:
        self.rank = 0  # the rank running now
        self.queues: dict[tuple[int, int], deque[torch.Tensor]] = defaultdict(deque)

    def send_tensor(self, tensor: torch.Tensor, dst: int, *_: Any, **__: Any) -> None:
        """Queue a copy (a real send gives the receiver its own tensor, too)."""
        if not isinstance(dst, int) or dst <= self.rank:
            raise RuntimeError(f"rank {self.rank} sends to rank {dst}: here a rank sends only "
                               "to a later rank")
        self.queues[(self.rank, dst)].append(tensor.detach().clone())

    def recv_tensor(self, src: int, *_: Any, **__: Any) -> torch.Tensor:
        """The oldest message from ``src``; a message never sent is an error, not a hang."""
        queue = self.queues[(src, self.rank)]
        if not queue:
            raise RuntimeError(f"rank {self.rank} waits for a message from rank {src} that "
                               "was never sent (on real ranks: a hang until the timeout)")
        return queue.popleft()

    def unread(self) -> dict[tuple[int, int], int]:
        """Messages sent but never received, by (source, destination)."""
        return {pair: len(q) for pair, q in self.queues.items() if q}


def run_ranks_in_order(worker: Callable[..., Any], args_by_rank: Sequence[Sequence[Any]],
                       modules: Sequence[ModuleType]) -> list[Any]:
    """Run ``worker(ctx, *args_by_rank[r])`` for r = 0, 1, ... in this process, with
    ``send_tensor`` / ``recv_tensor`` in ``modules`` (and in ``runtime.comm.wire``) replaced by
    a ``LoopbackMailbox``; return the results by rank. A rank's exception propagates with a note
    naming the rank; a message left unread is an error."""
    from ppdit.runtime.comm import wire as wire_module  # whose functions are patched

    mailbox, world = LoopbackMailbox(), len(args_by_rank)
    results = []
    with ExitStack() as stack:
        for module in {id(m): m for m in [*modules, wire_module]}.values():
            for name in ("send_tensor", "recv_tensor"):
                if hasattr(module, name):
                    stack.enter_context(mock.patch.object(module, name, getattr(mailbox, name)))
        for rank, args in enumerate(args_by_rank):
            mailbox.rank = rank
            ctx = SimpleNamespace(rank=rank, world_size=world, device=torch.device("cpu"),
                                  wire=Wire())
            try:
                results.append(worker(ctx, *args))
            except Exception as err:
                err.add_note(f"(raised on rank {rank} of {world}, run in order in one process)")
                raise
    if mailbox.unread():
        raise AssertionError(f"messages sent but never received, by (from, to): "
                             f"{mailbox.unread()}: sender and receiver disagree on the protocol")
    return results


@contextmanager
def hidden_cases():
    """A checker's hidden cases: a generator seeded anew at every run, so that no list of cases
    can be fitted. A failure inside the block names the seed (``$PPDIT_LAB_SEED`` replays it)."""
    seed = int(os.environ.get("PPDIT_LAB_SEED") or random.SystemRandom().randrange(2**31))
    try:
        yield random.Random(seed)
    except Exception as err:
        err.add_note(f"(hidden cases drawn with seed {seed}: PPDIT_LAB_SEED={seed} replays them)")
        raise


def run_on_ranks(worker: Callable[..., Any], world_size: int, lab: str, args: tuple,
                 pool=None) -> list[Any]:
    """A checker's worker on gloo CPU ranks, one thread each, as on any machine; a stub's
    ``NotImplementedError`` on a rank comes back as one (the suite tells stubs by it)."""
    from ppdit.runtime import RankError, launch

    try:
        return launch(worker, world_size, args=args, timeout_s=300, threads_per_rank=1,
                      echo=False, device="cpu", pool=pool)
    except RankError as err:
        if "NotImplementedError" in str(err):
            raise NotImplementedError(f"{lab} is not implemented yet") from err
        raise


def one_thread():
    """One intra-op thread for the block: a checker's reference runs are tiny, and beside its own
    ranks a second OpenMP thread only spins (a 5-step tiny generation ran ~20x slower)."""
    return torch_threads(1)


# -- a learner's own work: what a checker that draws its expectations from ppdit must refuse ---


def _foreign(name: str, banned: Sequence[str]) -> bool:
    """Whether a dotted name lies in ppdit (bar ``ppdit.teaching``, the labs' own toolkit) or
    in one of the ``banned`` modules (a checker, whose reference a learner could import)."""
    dotted = name + "."
    return (any(dotted.startswith(root + ".") for root in ("ppdit", *banned))
            and not dotted.startswith("ppdit.teaching."))


def check_own_work(impl: ModuleType, lab: str, banned: Sequence[str] = ()) -> None:
    """A learner's file may not use ppdit's code, nor ``banned`` modules: the checker compares
    it with them. Two looks: every import statement in the source, wherever it sits (inside a
    function too), and every global of the loaded module (an import under another spelling)."""
    rule = f"{lab} asks for your own work: it may not use ppdit's own code or the checker's"
    for node in ast.walk(ast.parse(inspect.getsource(impl))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in (n for n in names if _foreign(n, banned)):
            raise AssertionError(f"line {node.lineno} of your lab file imports {name}: {rule}")
    for name, value in vars(impl).items():
        origin = value.__name__ if isinstance(value, ModuleType) else getattr(
            value, "__module__", None)
        if isinstance(origin, str) and _foreign(origin, banned):
            raise AssertionError(f"your lab file's global {name!r} comes from {origin}: {rule}")


class _TooManyLines(BaseException):
    """Past the budget: no ``except Exception`` in a learner's code can catch it."""


@contextmanager
def counting_lines(budget: int, refusal: str):
    """Count the Python lines (and calls) the block runs, in every frame, with ``sys.settrace``;
    past ``budget`` stop it with ``AssertionError(refusal)``: a closed form runs a handful
    whatever its sizes, a clock or a search one or more per event. The tracer before is kept."""
    lines = [0]
    def tracer(frame, event, arg):
        lines[0] += event in ("call", "line")
        if lines[0] > budget:
            raise _TooManyLines
        return tracer

    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield
    except _TooManyLines:
        raise AssertionError(refusal) from None
    finally:
        sys.settrace(before)
