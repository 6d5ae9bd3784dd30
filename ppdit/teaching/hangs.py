"""A hang that gloo forgives and NCCL does not, small enough to read: lesson 01's last section.

``relay`` is step split's credit loop on two ranks, nothing else: rank 0 streams frames to
rank 1 with at most ``max_in_flight`` of them unacknowledged; rank 1 receives with its receives
posted ahead (so a transfer overlaps the work on the previous frame) and acknowledges each
frame. With the acknowledgements on the frames' communicator, NCCL's one ordered queue per peer
puts rank 1's next (posted-ahead) receive in front of the acknowledgement rank 0 waits for:
both ranks wait forever. ``acks_own_group=True`` is the fix step split uses
(``RankMesh.back_group``): the acknowledgements travel on a communicator of their own."""

from __future__ import annotations

import torch

from ppdit.runtime.comm.mesh import Mesh
from ppdit.runtime.comm.wire import FrameReceiver, FrameSender, FrameSpec
from ppdit.runtime.processes.rank import RankContext

FRAME = FrameSpec((64, 64), torch.float32, meta_slots=1)  # 16 KiB: a rendezvous in the lesson
ACK = FrameSpec((1,), torch.int64, meta_slots=0)


def relay(ctx: RankContext, n: int, max_in_flight: int, acks_own_group: bool) -> list[int]:
    """Rank 0: the frames it sent; rank 1: the frame indices it received, in order."""
    # the credits' group step split uses: a 2-stage pipeline's back group (made on both ranks)
    back = (Mesh((("step", 2),), pipeline="step").build(ctx.rank).back_group
            if acks_own_group else None)
    acks = max(0, n - max_in_flight)
    if ctx.rank == 0:
        frames = FrameSender(FRAME, 1, ctx.wire, timeout_s=30)
        inbox = FrameReceiver(ACK, 1, ctx.wire, group=back, count=acks, timeout_s=30)
        for k in range(n):
            if k >= max_in_flight:
                inbox.recv()  # frame k - max_in_flight has arrived
            frames.send(torch.full(FRAME.shape, float(k)), [k])
        frames.flush()
        return list(range(n))
    inbox = FrameReceiver(FRAME, 0, ctx.wire, count=n, timeout_s=30)  # posts ahead
    outbox = FrameSender(ACK, 0, ctx.wire, group=back, timeout_s=30)
    got = []
    for k in range(n):
        _, (index,) = inbox.recv()
        got.append(index)
        if k + max_in_flight < n:
            outbox.send(torch.ones(1, dtype=torch.int64), [])
    outbox.flush()
    return got
