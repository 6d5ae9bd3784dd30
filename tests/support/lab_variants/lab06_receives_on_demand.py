"""Lab 06 gone wrong: part 2 made safe by giving up the receives posted ahead.

Rank 1 posts the receive of frame k + 1 only after its work on frame k: one communicator, no
hang, every frame right, but no transfer ever overlaps the work any more (on a real pipeline
each handoff then waits for the sender to respond, once per frame).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ppdit.runtime.comm.wire import FrameReceiver, FrameSender, wait_for
from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab06_hang_solution.py")
SPEC, ACK, TIMEOUT_S = _solution.SPEC, _solution.ACK, _solution.TIMEOUT_S
make_frame, relay_worker = _solution.make_frame, _solution.relay_worker
_send_in_window = _solution._send_in_window


def consume(frame: torch.Tensor) -> float:
    return float(frame.double().sum())


def relay_one_communicator(ctx, n: int, max_in_flight: int) -> list:
    if ctx.rank == 0:
        frames = FrameSender(SPEC, 1, ctx.wire, announce=False, timeout_s=TIMEOUT_S)
        acks = FrameReceiver(ACK, 1, ctx.wire, timeout_s=TIMEOUT_S)
        return _send_in_window(frames, acks, n, max_in_flight)
    outbox = FrameSender(ACK, 0, ctx.wire, timeout_s=TIMEOUT_S)
    frame = SPEC.new_frame(ctx.wire)
    sums = []
    for k in range(n):
        if k >= max_in_flight:  # rank 0's order: the ack of frame k - max_in_flight, frame k
            outbox.send(torch.ones(1, dtype=torch.int64), [])
        wait_for(ctx.wire.recv(frame.buf, 0), TIMEOUT_S, f"frame {k}")
        sums.append(consume(frame.payload))
    outbox.flush()
    return sums
