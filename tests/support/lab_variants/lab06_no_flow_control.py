"""Lab 06 gone wrong: the hang is gone because the flow control is.

Acknowledgements on their own group, as in part 1's fix, but rank 0 never waits for one before
sending: it streams every frame, then collects the acknowledgements (which rank 1 sends once
every frame is in: every send may wait for its receive). Nothing hangs, and nothing
bounds the frames in flight either (on a real pipeline: the buffers, and the memory, of a
stage that falls behind).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist

from ppdit.runtime.comm.wire import FrameReceiver, FrameSender
from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab06_hang_solution.py")
SPEC, ACK, TIMEOUT_S = _solution.SPEC, _solution.ACK, _solution.TIMEOUT_S
make_frame, relay_one_communicator = _solution.make_frame, _solution.relay_one_communicator


def consume(frame: torch.Tensor) -> float:
    return float(frame.double().sum())


def relay_worker(ctx, n: int, max_in_flight: int) -> list:
    back = dist.new_group([0, 1])
    needed = max(0, n - max_in_flight)
    if ctx.rank == 0:
        frames = FrameSender(SPEC, 1, ctx.wire, timeout_s=TIMEOUT_S)
        acks = FrameReceiver(ACK, 1, ctx.wire, group=back, count=needed, timeout_s=TIMEOUT_S)
        for k in range(n):
            frames.send(make_frame(k), [k])
        for _ in range(needed):
            acks.recv()
        frames.flush()
        return [0] * n  # no acknowledgement had arrived before any frame went out
    inbox = FrameReceiver(SPEC, 0, ctx.wire, count=n, timeout_s=TIMEOUT_S)
    outbox = FrameSender(ACK, 0, ctx.wire, group=back, timeout_s=TIMEOUT_S)
    sums = []
    for _ in range(n):
        frame, _ = inbox.recv()
        sums.append(consume(frame))
    for _ in range(needed):  # rank 0 reads them only after its last frame
        outbox.send(torch.ones(1, dtype=torch.int64), [])
    outbox.flush()
    return sums
