"""NCCL's point-to-point rules, kept by CPU ranks: so an ordering that hangs on GPUs hangs here.

ppdit's users run NCCL; its tests run gloo, which forgives what NCCL does not:

* **One queue per pair.** NCCL runs un-batched sends and receives between two ranks on a 2-rank
  communicator and stream of their own, in issue order, each to its end before the next: a
  receive posted ahead holds every later operation to that peer, an awaited send included.
* **Batches and collectives share the group's stream.** ``batch_isend_irecv`` runs on the
  communicator the group's collectives use, in posting order: a batch posted before a
  collective on one rank and after it on another hangs.
* **A pair's first operation blocks its poster** until the peer posts its own first
  operation on that pair (the communicator is built then, through the store).
* **Every send may wait for its receive.** Small sends are often eager, but NCCL guarantees
  none: the limit is ``$PPDIT_NCCL_RULES`` ("strict": 0).
* **The watchdog.** The timeout in force when an operation is posted bounds it from then on,
  whatever a ``wait`` allows or a later ``_set_pg_timeout`` says.
* **Device-wide syncs, explicit and implicit**, wait for every posted operation (a posted
  receive is a kernel spinning on NCCL's stream): ``cudaDeviceSynchronize`` (``device_sync``),
  and those CUDA makes by itself where ppdit causes them (the CUDA guide's *Lazy Loading*
  hazards): a part's first kernel launch (each module type's first call on a rank),
  the caching allocator's ``cudaFree`` (``empty_cache``), entering ``torch.cuda.graph``.

``NcclRules`` enforces these on gloo: an ordered queue per (group, peer), and per group for
batches, each run by its own thread; a rendezvous receive tells its sender when it runs, on a
control group; collectives first wait for their group's batches. A stalled rank publishes its
queue heads in the store; a peer found waiting for it makes both raise ``P2PDeadlock`` naming
both queues. Functional collectives and FSDP2's gathers are not seen (gloo runs them
host-synchronously, stricter than NCCL).
"""

from __future__ import annotations

import inspect
import json
import queue
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

EAGER_BYTES = 4 << 20  # NCCL_BUFFSIZE's default: larger sends wait for the matching receive
STALL_S = 1.0  # a wait without progress this long looks for a deadlock with its peer
_POLL_S = 0.0005
FRESH_S = 0.5  # how recent a peer's published queue must be to count as still waiting
PAIR, GROUP = "pair", "group"  # an un-batched op's queue; the group's (batches, collectives)
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_to_all",
               "all_to_all_single", "broadcast", "reduce_scatter_tensor", "barrier", "gather",
               "scatter", "reduce")
_ACTIVE: list[NcclRules] = []  # this process's rules (a rank makes one): what syncs wait for


class P2PDeadlock(RuntimeError):
    """Two ranks wait for each other under NCCL's rules (the message shows both queues)."""


@dataclass(eq=False)  # a handle: equal only to itself, like gloo's Work
class Op:
    """One queued send or receive; to its poster, gloo's ``Work`` interface under the rules."""

    kind: str  # "send" or "recv"
    tensor: torch.Tensor | None  # let go once done: NCCL holds no buffer past its operation
    peer: int  # global rank
    group: object
    lane: str = PAIR  # PAIR (un-batched) or GROUP (batched: the group's collective stream)
    posted: float = field(default_factory=time.monotonic)
    bound_s: float = 1800.0  # the group's timeout at posting: NCCL's work keeps it
    large: bool = False  # above the eager limit: a rendezvous
    started: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    nbytes: int = 0
    rules: NcclRules | None = field(default=None, repr=False)  # whose ``wait`` it keeps

    def __post_init__(self) -> None:
        self.nbytes = self.tensor.numel() * self.tensor.element_size()

    def is_completed(self) -> bool:  # never blocks
        return self.done.is_set()

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Block until done; the timeout counts from the posting, as NCCL's does."""
        self.rules.wait(self, None if timeout is None else timeout.total_seconds())
        return True

    def describe(self) -> str:
        """"recv 1.05 MB from rank 1 (rendezvous, posted 2.1 s ago, running)"."""
        way = "to" if self.kind == "send" else "from"
        state = "done" if self.done.is_set() else "running" if self.started else "queued"
        batched = ", batched" if self.lane == GROUP else ""
        return (f"{self.kind} {_bytes(self.nbytes)} {way} rank {self.peer} "
                f"({'rendezvous' if self.large else 'eager'}{batched}, posted "
                f"{time.monotonic() - self.posted:.1f} s ago, {state})")


def _bytes(n: int) -> str:
    """96 B, 16.4 kB, 8.39 MB: a size as a person reads it."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


class _Channel:
    """One queue, (group, PAIR, peer) or (group, GROUP, -1): a thread runs its operations in
    posting order, each to the end before the next starts (a batch's start together), as
    NCCL's stream would. Each queue has its own gloo tags, so two never match each other."""

    def __init__(self, rules: NcclRules, key: tuple[str, str, int]):
        self.rules, self.key = rules, key
        self.tag = zlib.crc32(f"{key[0]}/{key[1]}".encode()) % (1 << 20)  # control messages
        self.data_tag = 0 if key[1] == PAIR else 1
        self.pending: deque[Op] = deque()  # posted, not yet done, in order (for the dump)
        self.lock = threading.Lock()
        self.work: queue.SimpleQueue = queue.SimpleQueue()  # batches of Op
        threading.Thread(target=self._run, name=f"nccl-rules-{key}", daemon=True).start()

    def post(self, ops: list[Op]) -> None:
        self.head()  # drop what is done: a done op would otherwise keep its tensor alive
        with self.lock:
            self.pending.extend(ops)
        self.work.put(ops)

    def head(self) -> Op | None:
        """The first operation not yet done: what holds the queue."""
        with self.lock:  # the poster and a waiter's deadlock check both trim the queue
            while self.pending and self.pending[0].done.is_set():
                self.pending.popleft()
            return self.pending[0] if self.pending else None

    def _run(self) -> None:
        while True:
            ops = self.work.get()
            try:
                self._run_batch(ops)
            except BaseException as err:  # the waiter reports it; the queue is dead anyway
                for op in ops:
                    op.error = err
                    op.done.set()
                return

    def _run_batch(self, ops: list[Op]) -> None:
        """Start a batch, then finish its operations in order. Its gloo works (and the
        tensors they hold) die with this call: NCCL holds no buffer past its operation."""
        works = [self._start(op) for op in ops]
        # gloo's own bound comes after the rules': the waiter names the timeout, not gloo
        beyond = timedelta(seconds=2 * self.rules.pg_timeout_s + 60)
        for op, started in zip(ops, works, strict=True):
            for w in started:
                w.wait(beyond)
            op.tensor = None  # the caller holds it if it still needs it
            op.done.set()

    def _start(self, op: Op) -> list:
        """Post ``op`` to gloo; the work to wait for before it counts as done."""
        op.started = True
        control, tag = self.rules.control, self.data_tag
        if op.kind == "recv":
            data = dist.irecv(op.tensor, op.peer, group=op.group, tag=tag)
            if op.large:  # tell the sender its rendezvous may complete
                go = torch.ones(1, dtype=torch.int64)
                self.rules.keep(dist.isend(go, op.peer, group=control, tag=self.tag), go)
            return [data]
        if not op.large:  # eager: NCCL copies it into the peer's buffer, so the sender's
            copy = op.tensor.clone()  # tensor is free at once: gloo gets a copy to read
            self.rules.keep(dist.isend(copy, op.peer, group=op.group, tag=tag), copy)
            return []
        data = dist.isend(op.tensor, op.peer, group=op.group, tag=tag)
        go = torch.zeros(1, dtype=torch.int64)
        return [dist.irecv(go, op.peer, group=control, tag=self.tag), data]


class NcclRules:
    """This rank's P2P operations, queued per (group, peer) and per group under NCCL's rules;
    ``pg_timeout_s``: the process group's timeout, the watchdog's bound on every operation."""

    def __init__(self, rank: int, eager_bytes: int = EAGER_BYTES, stall_s: float = STALL_S,
                 pg_timeout_s: float = 1800.0):
        self.rank, self.eager_bytes, self.stall_s = rank, eager_bytes, stall_s
        self.pg_timeout_s = pg_timeout_s
        # every rank makes it, in the same order: a collective, like every group (runtime.comm.mesh)
        self.control = dist.new_group(backend="gloo")
        self.store = dist.distributed_c10d._get_default_store()
        self.channels: dict[tuple, _Channel] = {}
        self._kept: deque = deque(maxlen=4096)  # eager sends' work and tensors, kept alive
        self._kept_lock = threading.Lock()
        self.in_sync: str | None = None  # the device-wide sync this rank is in, if any
        _ACTIVE[:] = [self]
        _watch_collectives()
        _watch_first_launches()

    # -- posting -----------------------------------------------------------------------------

    def isend(self, tensor: torch.Tensor, dst: int, group=None) -> Op:  # the pair's queue
        return self._post([("send", tensor, dst, group)], PAIR)[0]

    def irecv(self, tensor: torch.Tensor, src: int, group=None) -> Op:  # the pair's queue
        return self._post([("recv", tensor, src, group)], PAIR)[0]

    def batch(self, ops: list[tuple[str, torch.Tensor, int, object]]) -> list[Op]:
        """``batch_isend_irecv``: ("send" | "recv", tensor, peer, group), launched together on
        each group's one queue, the one its collectives use."""
        return self._post(ops, GROUP)

    def _post(self, ops: list[tuple], lane: str) -> list[Op]:
        made = [Op(kind, t, peer, group, lane, bound_s=self.pg_timeout_s, rules=self)
                for kind, t, peer, group in ops]
        by_channel: dict[tuple, list[Op]] = {}
        for op in made:
            op.large = op.nbytes > self.eager_bytes
            by_channel.setdefault(self._key(op), []).append(op)
        for key, channel_ops in by_channel.items():
            if key not in self.channels:
                if lane == PAIR:
                    self._meet(key, channel_ops[0])
                self.channels[key] = _Channel(self, key)
            self.channels[key].post(channel_ops)
        return made

    @staticmethod
    def _group_name(group) -> str:
        """A group's communicator, named the same on every rank (None and WORLD are one)."""
        if group is None or group is dist.group.WORLD:
            return "default group"
        return f"group {group.group_name} {dist.get_process_group_ranks(group)}"

    def _key(self, op: Op) -> tuple[str, str, int]:
        return self._group_name(op.group), op.lane, op.peer if op.lane == PAIR else -1

    def _meet(self, key: tuple[str, str, int], op: Op) -> None:
        """Block until the peer posts its own first operation on this pair, as NCCL's lazy
        communicator set-up does; a peer that waits for this rank meanwhile is a deadlock."""
        group, _, peer = key
        self.store.set(f"ppdit/nccl-rules/meet/{group}/{self.rank}-{peer}", "1")
        theirs = f"ppdit/nccl-rules/meet/{group}/{peer}-{self.rank}"
        while True:
            try:
                self.store.wait([theirs], timedelta(seconds=self.stall_s))
                return
            except (RuntimeError, dist.DistStoreError):
                if time.monotonic() > op.posted + self.pg_timeout_s:
                    raise TimeoutError(f"rank {self.rank}: the first operation on the pair with "
                                       f"rank {peer} ({group}) waited {self.pg_timeout_s:g} s "
                                       "for the peer's first (NCCL builds a pair's "
                                       "communicator when both have posted)") from None
                self._look_for_deadlock(op, building=True)

    def keep(self, work, tensor: torch.Tensor) -> None:
        """Hold a posted eager send (and what it reads) until gloo is done with it; the sends
        gloo has finished are let go here, so a long run does not pile up their copies."""
        with self._kept_lock:  # every peer's queue thread keeps its sends here
            while self._kept and self._kept[0][0].is_completed():
                self._kept.popleft()
            self._kept.append((work, tensor))

    # -- waiting -----------------------------------------------------------------------------

    def wait(self, op: Op, timeout_s: float | None) -> None:
        """Until ``op`` completes: ``TimeoutError`` at its posting + ``timeout_s`` or the group's
        timeout at its posting, whichever comes first (NCCL's rule and its watchdog's: a timeout
        raised after the posting does not reach the work), ``P2PDeadlock`` as soon as its peer
        is found waiting for this rank."""
        bound = op.bound_s if timeout_s is None else min(op.bound_s, timeout_s)
        start = time.monotonic()
        while not op.done.wait(_POLL_S * 20):
            now = time.monotonic()
            if now > op.posted + bound:
                whose = ("the process group's timeout when it was posted: NCCL's watchdog "
                         "bounds every operation from its posting" if bound == op.bound_s
                         and timeout_s != bound else "NCCL's rule: the timeout counts from "
                         "the posting")
                raise TimeoutError(f"rank {self.rank}: {op.describe()} did not complete within "
                                   f"{bound:g} s of its posting ({whose}).\n{self.dump()}")
            if now - start > self.stall_s:
                self._look_for_deadlock(op)
        if op.error is not None:
            raise RuntimeError(f"rank {self.rank}: {op.describe()} failed: {op.error}") \
                from op.error

    def drain(self, group_name: str | None = None) -> None:
        """Wait for every queued operation (of one group's batch queue, or all of them):
        what a collective waits for on its group's stream, and a device-wide sync on all."""
        for key, channel in list(self.channels.items()):
            if group_name is None or key[:2] == (group_name, GROUP):
                while (op := channel.head()) is not None:
                    self.wait(op, None)

    def _publish(self, state: dict) -> None:
        self.store.set(f"ppdit/nccl-rules/{self.rank}", json.dumps(state))

    def _look_for_deadlock(self, op: Op, building: bool = False) -> None:
        key = self._key(op)
        head = op if building else (self.channels[key].head() or op)
        mine = {"rank": self.rank, "peer": head.peer, "kind": "build" if building else head.kind,
                "large": head.large, "group": key[0], "lane": op.lane, "t": time.time(),
                "queue": self.dump(), "sync": self.in_sync}
        self._publish(mine)
        other = f"ppdit/nccl-rules/{head.peer}"
        if not self.store.check([other]):
            return
        theirs = json.loads(self.store.get(other))
        why = _why_stuck(mine, theirs)
        if why is not None:
            raise P2PDeadlock(
                f"ranks {self.rank} and {head.peer} wait for each other under NCCL's rules "
                f"({why}):\n{mine['queue']}\n{theirs['queue']}\n{_syncs(mine, theirs)}Fix: "
                "post the operation the peer needs first before the one that waits for it, fuse "
                "paired traffic with batch_isend_irecv, give each direction its own group, batch "
                "on both sides or neither, and keep batches and collectives of a group in one "
                "order everywhere.")

    def dump(self) -> str:
        """This rank's queued operations, per queue, head first."""
        lines = [f"rank {self.rank}'s queues:"]
        for (group, lane, peer), channel in self.channels.items():
            channel.head()
            with channel.lock:
                ops = list(channel.pending)
            if ops:
                who = f"to/from rank {peer}" if lane == PAIR else "batched"
                lines.append(f"  {who} ({group}): " + "; ".join(op.describe() for op in ops))
        return "\n".join(lines if len(lines) > 1 else [lines[0] + " empty"])


def _why_stuck(mine: dict, theirs: dict) -> str | None:
    """Why two published heads wait for each other, or None. A waiting rank republishes on
    every poll (10 ms): an entry older than ``FRESH_S`` belongs to a rank that has stopped
    waiting (a stale head must not be mistaken for a deadlock); a rank inside a collective
    cannot republish, so its entry holds until the collective returns."""
    if theirs.get("collective") is not None:
        if theirs["collective"] == mine["group"] and mine["lane"] == GROUP:
            return (f"rank {theirs['rank']} is in a collective on {mine['group']} while this "
                    "rank's batch, posted before its own collective, waits for it: one stream")
        if mine["kind"] == "build" and _includes(theirs["collective"], mine["rank"]):
            return ("this rank builds a pair communicator that the peer, in a collective "
                    "waiting for this rank, cannot join")
        return None
    if time.time() - theirs["t"] >= FRESH_S or theirs["peer"] != mine["rank"]:
        return None
    if "build" in (mine["kind"], theirs["kind"]):
        return "a pair's first operation blocks its poster until the peer posts on that pair"
    if mine["group"] == theirs["group"] and mine["lane"] != theirs["lane"]:
        return "one side batched, the other not: NCCL runs them on different communicators"
    if mine["kind"] == theirs["kind"] and (mine["kind"] == "recv" or
                                           (mine["large"] and theirs["large"])):
        return "one ordered queue per peer: an operation waits for every one posted before it"
    return None


def _syncs(*states: dict) -> str:
    """The device-wide syncs the two ranks are in: each waits there for all it has posted."""
    return "".join(f"rank {st['rank']} is in a device-wide sync: {st['sync']}; CUDA waits there "
                   "for every posted NCCL operation: sync before posting, or post only what the "
                   "peer sends without waiting for this rank.\n"
                   for st in states if st.get("sync"))


def _includes(group_name: str, rank: int) -> bool:
    """Whether the group named by ``NcclRules._group_name`` holds ``rank``."""
    return group_name == "default group" or rank in json.loads(group_name.split(" ", 2)[2])


def device_sync(cause: str = "an explicit device-wide sync (cudaDeviceSynchronize)") -> None:
    """What a device-wide sync does to communication, on CPU ranks keeping the rules: wait for
    every operation this rank has posted (a posted receive spins on NCCL's stream). A deadlock
    found meanwhile names ``cause``, on this rank and its peer."""
    for rules in _ACTIVE:
        rules.in_sync = cause
        try:
            rules.drain()
        finally:
            rules.in_sync = None


_LAUNCHED: set[type] = set()  # module types this process has run: their kernels are loaded


def _watch_first_launches() -> None:
    """Model lazy loading: the first call of each module type on a rank loads its kernels,
    which may synchronise the device (once a process; a warm-up before posting clears it)."""
    if not getattr(_watch_first_launches, "done", False):
        torch.nn.modules.module.register_module_forward_pre_hook(_first_launch)
        _watch_first_launches.done = True


def _first_launch(module: torch.nn.Module, args) -> None:
    kind = type(module)
    if kind in _LAUNCHED or torch.compiler.is_compiling() or any(
            isinstance(a, torch.Tensor) and a.is_meta for a in args):  # meta: no kernel runs
        return
    _LAUNCHED.add(kind)
    device_sync(f"the first launch of {kind.__name__}'s kernels (lazy loading may synchronise "
                "the context)")


def _watch_collectives() -> None:
    """Route ``torch.distributed``'s collectives through ``_collective`` (once a process)."""
    for name in COLLECTIVES:
        fn = getattr(c10d, name)
        if not getattr(fn, "_ppdit_rules", False):
            wrapped = _collective(fn)
            setattr(c10d, name, wrapped)
            setattr(dist, name, wrapped)


def _collective(fn):
    signature = inspect.signature(fn)

    def call(*args, **kwargs):
        """The group's queued batches first (its one stream), then the collective; while in
        it, this rank says so, for a peer whose batch waits on it. (Compiled code traces the
        collective itself: Dynamo must see torch's own function.)"""
        rules = _ACTIVE[0] if _ACTIVE else None
        if rules is None or torch.compiler.is_compiling():
            return fn(*args, **kwargs)
        group = signature.bind_partial(*args, **kwargs).arguments.get("group")
        name = rules._group_name(group)
        rules.drain(name)
        rules._publish({"rank": rules.rank, "collective": name, "queue": rules.dump()})
        try:
            return fn(*args, **kwargs)
        finally:
            rules._publish({"rank": rules.rank, "peer": -1, "t": 0})

    call._ppdit_rules = True
    call.__wrapped__, call.__doc__, call.__name__ = fn, fn.__doc__, fn.__name__
    return call
