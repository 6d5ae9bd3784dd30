"""NCCL's point-to-point rules, kept by CPU ranks: so an ordering that hangs on GPUs hangs here.

ppdit's users run NCCL; its tests run gloo, which forgives what NCCL does not:

* **One queue per peer.** NCCL runs the un-batched sends and receives between two ranks on one
  communicator and one stream, in the order they were issued, and each blocks that stream until
  it completes. A receive posted ahead therefore holds every later operation to that peer, a
  send the peer is waiting for included: a deadlock. Gloo's sends and receives go their own
  ways, so the same code runs there.
* **Rendezvous above the buffer.** A small send is copied into the peer's buffer and completes
  (eager); one larger than NCCL's buffer (``NCCL_BUFFSIZE``, 4 MiB by default) completes only
  once the peer's matching receive runs. So some orders hang only at real sizes.
* **Groups.** ``batch_isend_irecv`` launches its operations together: paired traffic fused
  that way cannot block itself.
* **Timeouts count from posting**, not from the wait, and abort the whole group.

``NcclRules`` enforces these on gloo: per (group, peer) an ordered queue of this rank's
operations, run by a thread of its own (made at the first operation to that peer, as NCCL
makes its communicators lazily): an operation reaches gloo only when everything before it has
completed (or belongs to its batch); a receive larger than the eager limit tells its sender,
on a control group, when it runs; a large send completes only after hearing so. A rank whose
wait stalls publishes its queues in the process group's store; when the peer is stalled on it
too, with heads that wait for each other, both raise ``P2PDeadlock`` naming the pair and both
queues: within seconds, not at the timeout.
"""

from __future__ import annotations

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

EAGER_BYTES = 4 << 20  # NCCL_BUFFSIZE's default: larger sends wait for the matching receive
STALL_S = 1.0  # a wait without progress this long looks for a deadlock with its peer
_POLL_S = 0.0005
FRESH_S = 0.5  # how recent a peer's published queue must be to count as still waiting


class P2PDeadlock(RuntimeError):
    """Two ranks wait for each other under NCCL's rules (the message shows both queues)."""


@dataclass(eq=False)  # a handle: equal only to itself, like gloo's Work
class Op:
    """One queued send or receive; to its poster, gloo's ``Work`` interface under the rules."""

    kind: str  # "send" or "recv"
    tensor: torch.Tensor | None  # let go once done: NCCL holds no buffer past its operation
    peer: int  # global rank
    group: object
    posted: float = field(default_factory=time.monotonic)
    large: bool = False  # above the eager limit: a rendezvous
    started: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    nbytes: int = 0
    rules: NcclRules | None = field(default=None, repr=False)  # whose ``wait`` it keeps

    def __post_init__(self) -> None:
        self.nbytes = self.tensor.numel() * self.tensor.element_size()

    def is_completed(self) -> bool:
        """Whether the operation completed (never blocks)."""
        return self.done.is_set()

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Block until done; the timeout counts from the posting, as NCCL's does."""
        self.rules.wait(self, timeout.total_seconds() if timeout is not None else 1800.0)
        return True

    def describe(self) -> str:
        """"recv 1.05 MB from rank 1 (rendezvous, posted 2.1 s ago, running)"."""
        way = "to" if self.kind == "send" else "from"
        state = "done" if self.done.is_set() else "running" if self.started else "queued"
        return (f"{self.kind} {_bytes(self.nbytes)} {way} rank {self.peer} "
                f"({'rendezvous' if self.large else 'eager'}, posted "
                f"{time.monotonic() - self.posted:.1f} s ago, {state})")


def _bytes(n: int) -> str:
    """96 B, 16.4 kB, 8.39 MB: a size as a person reads it."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


class _Channel:
    """One (group, peer) queue: a thread runs its operations in posting order, each to the
    end before the next starts (a batch's operations start together), as NCCL's stream would."""

    def __init__(self, rules: NcclRules, group: str, peer: int):
        self.rules, self.group, self.peer = rules, group, peer
        self.tag = zlib.crc32(group.encode()) % (1 << 20)  # its control messages' tag
        self.pending: deque[Op] = deque()  # posted, not yet done, in order (for the dump)
        self.lock = threading.Lock()
        self.work: queue.SimpleQueue = queue.SimpleQueue()  # batches of Op
        threading.Thread(target=self._run, name=f"nccl-rules-{peer}", daemon=True).start()

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
        for op, started in zip(ops, works, strict=True):
            for w in started:
                w.wait()
            op.tensor = None  # the caller holds it if it still needs it
            op.done.set()

    def _start(self, op: Op) -> list:
        """Post ``op`` to gloo; the work to wait for before it counts as done."""
        op.started = True
        control = self.rules.control
        if op.kind == "recv":
            data = dist.irecv(op.tensor, op.peer, group=op.group)
            if op.large:  # tell the sender its rendezvous may complete
                go = torch.ones(1, dtype=torch.int64)
                self.rules.keep(dist.isend(go, op.peer, group=control, tag=self.tag), go)
            return [data]
        if not op.large:  # eager: NCCL copies it into the peer's buffer, so the sender's
            copy = op.tensor.clone()  # tensor is free at once: gloo gets a copy to read
            self.rules.keep(dist.isend(copy, op.peer, group=op.group), copy)
            return []
        data = dist.isend(op.tensor, op.peer, group=op.group)
        go = torch.zeros(1, dtype=torch.int64)
        return [dist.irecv(go, op.peer, group=control, tag=self.tag), data]


class NcclRules:
    """This rank's P2P operations, queued per (group, peer) under NCCL's rules."""

    def __init__(self, rank: int, eager_bytes: int = EAGER_BYTES, stall_s: float = STALL_S):
        self.rank, self.eager_bytes, self.stall_s = rank, eager_bytes, stall_s
        # every rank makes it, in the same order: a collective, like every group (runtime.comm.mesh)
        self.control = dist.new_group(backend="gloo")
        self.store = dist.distributed_c10d._get_default_store()
        self.channels: dict[tuple, _Channel] = {}
        self._kept: deque = deque(maxlen=4096)  # eager sends' work and tensors, kept alive
        self._kept_lock = threading.Lock()

    # -- posting -----------------------------------------------------------------------------

    def isend(self, tensor: torch.Tensor, dst: int, group=None) -> Op:
        """Queue a send to global rank ``dst``."""
        return self.batch([("send", tensor, dst, group)])[0]

    def irecv(self, tensor: torch.Tensor, src: int, group=None) -> Op:
        """Queue a receive from global rank ``src``."""
        return self.batch([("recv", tensor, src, group)])[0]

    def batch(self, ops: list[tuple[str, torch.Tensor, int, object]]) -> list[Op]:
        """``batch_isend_irecv``: ("send" | "recv", tensor, peer, group), launched together
        (those to one peer start at once; to several peers, each in its own queue)."""
        made = [Op(kind, t, peer, group, rules=self) for kind, t, peer, group in ops]
        by_channel: dict[tuple, list[Op]] = {}
        for op in made:
            op.large = op.nbytes > self.eager_bytes
            by_channel.setdefault(self._key(op), []).append(op)
        for key, channel_ops in by_channel.items():
            if key not in self.channels:
                self.channels[key] = _Channel(self, *key)
            self.channels[key].post(channel_ops)
        return made

    @staticmethod
    def _key(op: Op) -> tuple[str, int]:
        """(group, peer): a group is a communicator of its own, with its own queues, even
        beside another group of the same ranks (its name is the same on every rank)."""
        if op.group is None or op.group is dist.group.WORLD:  # one communicator in NCCL
            return "default group", op.peer
        ranks = dist.get_process_group_ranks(op.group)
        return f"group {op.group.group_name} {ranks}", op.peer

    def keep(self, work, tensor: torch.Tensor) -> None:
        """Hold a posted eager send (and what it reads) until gloo is done with it; the sends
        gloo has finished are let go here, so a long run does not pile up their copies."""
        with self._kept_lock:  # every peer's queue thread keeps its sends here
            while self._kept and self._kept[0][0].is_completed():
                self._kept.popleft()
            self._kept.append((work, tensor))

    # -- waiting -----------------------------------------------------------------------------

    def wait(self, op: Op, timeout_s: float) -> None:
        """Until ``op`` completes: ``TimeoutError`` at its posting + ``timeout_s`` (NCCL's rule),
        ``P2PDeadlock`` as soon as its peer is found waiting for this rank."""
        start = time.monotonic()
        while not op.done.wait(_POLL_S * 20):
            now = time.monotonic()
            if now > op.posted + timeout_s:
                raise TimeoutError(f"rank {self.rank}: {op.describe()} did not complete within "
                                   f"{timeout_s:g} s of its posting (NCCL's rule: the timeout "
                                   f"counts from the posting).\n{self.dump()}")
            if now - start > self.stall_s:
                self._look_for_deadlock(op)
        if op.error is not None:
            raise RuntimeError(f"rank {self.rank}: {op.describe()} failed: {op.error}") \
                from op.error

    def _look_for_deadlock(self, op: Op) -> None:
        head = self.channels[self._key(op)].head() or op
        mine = {"rank": self.rank, "peer": head.peer, "kind": head.kind, "large": head.large,
                "started": head.started, "t": time.time(), "queue": self.dump()}
        self.store.set(f"ppdit/nccl-rules/{self.rank}", json.dumps(mine))
        key = f"ppdit/nccl-rules/{head.peer}"
        if not self.store.check([key]):
            return
        theirs = json.loads(self.store.get(key))
        # A waiting rank republishes its queue on every poll (10 ms): an entry older than
        # FRESH_S belongs to a rank that has stopped waiting (it computes, its head may have
        # moved on), and a stale head must not be mistaken for a deadlock.
        recent = time.time() - theirs["t"] < FRESH_S
        # each head needs the other's queue to move: two receives, or two rendezvous sends
        crossed = (theirs["peer"] == self.rank and theirs["kind"] == head.kind
                   and (head.kind == "recv" or (head.large and theirs["large"])))
        if recent and crossed:
            raise P2PDeadlock(
                f"ranks {self.rank} and {head.peer} wait for each other under NCCL's rules "
                f"(one ordered queue per peer: an operation waits for every one posted before "
                f"it to that peer):\n{mine['queue']}\n{theirs['queue']}\n"
                "Fix: post the operation the peer needs first before the one that waits for "
                "it, or fuse paired traffic with batch_isend_irecv, or give each direction "
                "its own group.")

    def dump(self) -> str:
        """This rank's queued operations, per peer, head first."""
        lines = [f"rank {self.rank}'s queues:"]
        for (group, peer), channel in self.channels.items():
            channel.head()
            with channel.lock:
                ops = list(channel.pending)
            if ops:
                lines.append(f"  to/from rank {peer} ({group}): "
                             + "; ".join(op.describe() for op in ops))
        return "\n".join(lines if len(lines) > 1 else [lines[0] + " empty"])
