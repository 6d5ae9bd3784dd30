"""Helpers for the labs: load a student's file (or the reference solution) as an importable
module, so the checkers can run its functions — also inside spawned ranks, which import
workers by module name — and run a pipeline's ranks one after another in one process, so a
checker can try plans that real ranks would never be given (``run_ranks_in_order``)."""

from __future__ import annotations

import ast
import functools
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
    if unread := {pair: len(q) for pair, q in mailbox.queues.items() if q}:
        raise AssertionError(f"messages sent but never received, by (from, to): {unread}: "
                             "sender and receiver disagree on the protocol")
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

_PPDIT = os.path.dirname(os.path.dirname(__file__)) + os.sep  # ppdit's files ...
_TEACHING = os.path.dirname(__file__) + os.sep  # ... bar this folder, the labs' own toolkit
# Ways to reach a module or code by a string built at run time, which no scan of import
# statements can read: refused as names (``exec``), attributes (``sys.modules``) and imports.
_DYNAMIC = frozenset({"importlib", "__import__", "import_module", "modules", "exec", "eval",
                      "compile", "runpy", "pkgutil", "builtins", "__builtins__", "globals",
                      "vars", "getattr", "__dict__", "__globals__", "settrace", "setprofile"})


def _foreign(name: str, banned: Sequence[str], path: str = "") -> bool:
    """Whether a dotted module name (or its file) lies in ppdit, bar ``ppdit.teaching`` (the
    labs' own toolkit), or in one of the ``banned`` modules (a checker, holding a reference)."""
    dotted = name + "."
    return ((dotted.startswith(tuple(f"{root}." for root in ("ppdit", *banned)))
             or path.startswith(_PPDIT))
            and not (dotted.startswith("ppdit.teaching.") or path.startswith(_TEACHING)))


def _borrowed(node: ast.AST, banned: Sequence[str]) -> str | None:
    """The name a node of a learner's source gives that it may not: a module of ppdit's or a
    checker's (an import's, or a ``from``'s), or a way to reach code by a string (``_DYNAMIC``)."""
    name = next((getattr(node, key) for key in ("id", "attr", "module", "name")
                 if isinstance(getattr(node, key, None), str)), "")
    return name if _foreign(name, banned) or name.split(".")[0] in _DYNAMIC else None


def _guarded(fn: Callable, rule: str, banned: Sequence[str], found: list[str]) -> Callable:
    """``fn`` under a profile hook that notes the first call into ppdit's or a banned module's
    code: however ``fn`` got there (a name built at run time, a reference kept from load time),
    the code that runs has their file and module. Raised as ``fn`` returns: no ``except``
    in the learner's code can swallow it."""
    def hook(frame, event, _):
        code, name = frame.f_code, frame.f_globals.get("__name__", "")
        if event == "call" and not found and _foreign(name, banned, code.co_filename):
            found.append(f"{name}.{code.co_qualname} ({code.co_filename})")

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        before = sys.getprofile()
        sys.setprofile(hook)
        try:
            return fn(*args, **kwargs)
        finally:
            sys.setprofile(before)
            if found:
                raise AssertionError(f"your {fn.__name__} ran {found[0]}: {rule}")
    return guarded


def check_own_work(impl: ModuleType, lab: str, banned: Sequence[str] = ()) -> None:
    """A learner's file may not use ppdit's code, nor ``banned`` modules: the checker compares
    it with them. Three looks: the source (imports anywhere, and the names that import by a
    string: ``importlib``, ``__import__``, ``sys.modules``, ``exec``...), the loaded module's
    globals (an import under another spelling), and every call into ppdit's code that the
    file's functions make, however they reached it: they are replaced by ``_guarded`` ones."""
    rule = (f"{lab} asks for your own work: it may not use ppdit's own code or the checker's, "
            "nor reach code by a name built at run time (importlib, __import__, sys.modules, "
            "exec, eval, getattr...)")
    for node in ast.walk(ast.parse(inspect.getsource(impl))):
        if name := _borrowed(node, banned):
            raise AssertionError(f"line {node.lineno} of your lab file uses {name} "
                                 f"(`{ast.unparse(node)[:60]}`): {rule}")
    found: list[str] = []
    for name, value in list(vars(impl).items()):
        origin = value.__name__ if isinstance(value, ModuleType) else getattr(
            value, "__module__", None)
        if isinstance(origin, str) and _foreign(origin, banned):
            raise AssertionError(f"your lab file's global {name!r} comes from {origin}: {rule}")
        if inspect.isfunction(value):  # the file's own, or one from a helper file of its
            setattr(impl, name, _guarded(value, rule, banned, found))


class _TooManyLines(BaseException):
    """Past the budget: no ``except Exception`` in a learner's code can catch it."""


@contextmanager
def counting_lines(budget: int, refusal: str):
    """Count the Python lines (and calls) the block runs, in every frame, with ``sys.settrace``;
    past ``budget`` stop it and raise ``AssertionError(refusal)`` as it ends (also if the
    learner's code caught the stop and went on): a closed form runs a handful whatever its
    sizes, a clock or a search one or more per event. The tracer before is kept."""
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
    finally:
        sys.settrace(before)
        if lines[0] > budget:
            raise AssertionError(refusal) from None
