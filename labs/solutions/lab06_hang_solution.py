"""Reference solution of lab 06.

Part 1 gives the acknowledgements a communicator of their own (what step split does with
``RankGroups.back_group``). Part 2 keeps one communicator, where every send may wait for its
receive, so both ranks post their operations to each other in one and the same order: rank 0
receives the acknowledgement of frame k - max_in_flight just before it sends frame k, so rank 1
sends that acknowledgement just before it posts the receive of frame k (and no earlier).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ppdit.runtime.comm.wire import FrameReceiver, FrameSender, FrameSpec, wait_for

SPEC = FrameSpec((80, 64), torch.float32, meta_slots=1)
ACK = FrameSpec((1,), torch.int64, meta_slots=0)
TIMEOUT_S = 20.0


def make_frame(k: int) -> torch.Tensor:
    """Frame ``k``'s payload: what rank 0 sends, in order k = 0, 1, ..."""
    numel = SPEC.raw_payload_nbytes // 4
    return torch.arange(numel, dtype=torch.float32).view(SPEC.shape) + 1000 * k


def consume(frame: torch.Tensor) -> float:
    """Rank 1's work on one frame (here: its checksum)."""
    return float(frame.double().sum())


def _send_in_window(frames: FrameSender, acks: FrameReceiver, n: int,
                    max_in_flight: int) -> list[int]:
    """Rank 0: frame k goes out only once frame k - max_in_flight is acknowledged."""
    acks_before, got = [], 0
    for k in range(n):
        if k >= max_in_flight:
            acks.recv()  # frame k - max_in_flight has arrived
            got += 1
        acks_before.append(got)
        frames.send(make_frame(k), [k])
    frames.flush()
    return acks_before


def relay_worker(ctx, n: int, max_in_flight: int) -> list:
    """Part 1: the acknowledgements travel on a communicator of their own."""
    back = dist.new_group([0, 1])  # a collective: both ranks, in the same order
    needed = max(0, n - max_in_flight)  # acknowledgements rank 0 waits for
    if ctx.rank == 0:
        frames = FrameSender(SPEC, 1, ctx.wire, timeout_s=TIMEOUT_S)
        acks = FrameReceiver(ACK, 1, ctx.wire, group=back, count=needed, timeout_s=TIMEOUT_S)
        return _send_in_window(frames, acks, n, max_in_flight)
    inbox = FrameReceiver(SPEC, 0, ctx.wire, count=n, timeout_s=TIMEOUT_S)  # posts ahead
    outbox = FrameSender(ACK, 0, ctx.wire, group=back, timeout_s=TIMEOUT_S)
    sums = []
    for k in range(n):
        frame, _ = inbox.recv()
        sums.append(consume(frame))
        if k < needed:
            outbox.send(torch.ones(1, dtype=torch.int64), [])
    outbox.flush()
    return sums


def relay_one_communicator(ctx, n: int, max_in_flight: int) -> list:
    """Part 2: one communicator, each rank's queue in an order that cannot block the peer."""
    if ctx.rank == 0:
        # no header (rank 1 receives raw frames), and no acknowledgement posted ahead: that
        # receive would stand in front of frames rank 1 must receive before it acknowledges
        frames = FrameSender(SPEC, 1, ctx.wire, announce=False, timeout_s=TIMEOUT_S)
        acks = FrameReceiver(ACK, 1, ctx.wire, timeout_s=TIMEOUT_S)  # no count: on demand
        return _send_in_window(frames, acks, n, max_in_flight)
    outbox = FrameSender(ACK, 0, ctx.wire, timeout_s=TIMEOUT_S)
    ring = [SPEC.new_frame(ctx.wire) for _ in range(2)]
    posted = ctx.wire.recv(ring[0].buf, 0)
    sums = []
    for k in range(n):
        wait_for(posted, TIMEOUT_S, f"receiving frame {k} from rank 0")
        if k + 1 < n:  # rank 0's order: the ack of frame k + 1 - max_in_flight, then frame k + 1
            if k + 1 >= max_in_flight:
                outbox.send(torch.ones(1, dtype=torch.int64), [])
            posted = ctx.wire.recv(ring[(k + 1) % 2].buf, 0)  # before the work on frame k
        sums.append(consume(ring[k % 2].payload))
    outbox.flush()
    return sums
