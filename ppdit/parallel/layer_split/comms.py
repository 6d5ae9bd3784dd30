"""Layer-split PP's messages: what travels between stages, framed and matched by order.

Two kinds of message cross a stage boundary: hidden states ``h`` (n, S, D) from one chunk to
the next, and updated latents (n, C, F, H, W) from the last stage back to the first (the wrap).
Both are fixed-layout frames (``ppdit.runtime.comm.wire``), one message per hop.
"""

from __future__ import annotations

from collections import deque

import torch

from ppdit.model import torch_dtype
from ppdit.parallel.layer_split.schedule import LayerSplitPlan, Message, messages_sent, sender_of
from ppdit.runtime.comm.mesh import Lanes
from ppdit.runtime.comm.wire import Frame, FrameSpec, Wire, wait_for

KINDS = ("hidden", "latent")


def message_spec(plan: LayerSplitPlan, msg: Message, dim: int) -> FrameSpec:
    """The frame of a message: hidden (n, S, D) in the model's dtype (half the bytes in bf16;
    PipeFusion: a patch's S), or latents (n, C, F, H, W) in fp32 (the sampler's state); n = the
    micro-batch's size."""
    n = len(plan.micro_samples(msg.micro))
    if msg.kind == "hidden":
        patch = plan.patch(msg.step, msg.micro)
        return FrameSpec((n, patch.stop - patch.start, dim), torch_dtype(plan.dtype),
                         meta_slots=4)
    return FrameSpec((n, *plan.shape[1:]), torch.float32, meta_slots=4)


def encode(msg: Message) -> list[int]:
    return [KINDS.index(msg.kind), msg.step, msg.micro, msg.chunk]


class Mailbox:
    """Receives a rank's messages in each sender's own order, and hands them out by name. Every
    rank can compute what every other rank sends, in order (``messages_sent``): posting receives
    in exactly that order, ``ahead`` of need so transfers overlap compute, and stashing what is
    not needed yet lets one pair of ranks carry several kinds of message without tags, on gloo and
    NCCL alike.

    Posting ahead is safe under NCCL with a communicator per direction (``lanes``: see the
    package docstring). On one communicator, P = 2 deadlocks: rank 1's receive of the next
    hidden state, posted ahead, holds the queue its wrapped latent needs, and rank 0 needs that
    latent to produce the hidden state (``tests/ranks/test_nccl_rules.py`` keeps that order)."""

    def __init__(self, plan: LayerSplitPlan, rank: int, dim: int, wire: Wire, timeout_s: float,
                 ahead: int = 2, lanes: Lanes | None = None):
        self.plan, self.rank, self.dim, self.wire = plan, rank, dim, wire
        self.timeout_s, self.ahead = timeout_s, ahead
        self.lanes = lanes
        self.expected = {src: deque(m for dst, m in messages_sent(plan, src) if dst == rank)
                         for src in range(plan.num_stages) if src != rank}
        self.posted: dict[int, deque] = {src: deque() for src in self.expected}
        self.pool: dict[FrameSpec, list[Frame]] = {}
        self.stash: dict[Message, torch.Tensor] = {}

    def get(self, msg: Message) -> torch.Tensor:
        """The payload of ``msg``, receiving (and stashing) earlier messages as needed."""
        src = sender_of(self.plan, self.rank, msg)
        while msg not in self.stash:
            self._post(src)
            if not self.posted.get(src):
                raise RuntimeError(f"rank {self.rank} waits for {msg}, which rank {src} "
                                   "never sends: the schedules disagree")
            nxt, spec, frame, work = self.posted[src].popleft()
            wait_for(work, self.timeout_s, f"rank {self.rank} receiving {nxt} from rank {src}")
            if frame.read_meta() != encode(nxt):
                raise RuntimeError(f"rank {self.rank} expected {nxt} from rank {src}, "
                                   f"got metadata {frame.read_meta()}")
            self.stash[nxt] = frame.arrived(self.wire.device, copy=True)
            self.pool.setdefault(spec, []).append(frame)
        self._post(src)  # keep receives in flight while this rank computes
        return self.stash.pop(msg)

    def _post(self, src: int) -> None:
        while self.expected.get(src) and len(self.posted[src]) < self.ahead:
            nxt = self.expected[src].popleft()
            spec = message_spec(self.plan, nxt, self.dim)
            free = self.pool.get(spec)
            frame = free.pop() if free else spec.new_frame(self.wire)
            self.posted[src].append((nxt, spec, frame,
                                     self.wire.recv(frame.buf, src, self.group(src))))

    def group(self, src: int):
        """The communicator messages from ``src`` arrive on (None: the default group)."""
        return self.lanes.between(src, self.rank) if self.lanes is not None else None
