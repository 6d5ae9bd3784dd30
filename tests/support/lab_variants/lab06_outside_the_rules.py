"""Lab 06 gone wrong: the handout's relay with the hang "fixed" by leaving NCCL's rules.

The helpers get a wire of the rank's device but not the rank's own (``ctx.wire`` keeps NCCL's
rules; ``Wire(ctx.device)`` does not): every send and receive goes to gloo as it is, which
forgives the order; on GPUs, NCCL would not.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ppdit.runtime.comm.wire import FrameReceiver, FrameSender, Wire
from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab06_hang_solution.py")
SPEC, ACK, TIMEOUT_S = _solution.SPEC, _solution.ACK, _solution.TIMEOUT_S
make_frame, relay_one_communicator = _solution.make_frame, _solution.relay_one_communicator


def consume(frame: torch.Tensor) -> float:
    return float(frame.double().sum())


def relay_worker(ctx, n: int, max_in_flight: int) -> list:
    needed = max(0, n - max_in_flight)
    if ctx.rank == 0:
        frames = FrameSender(SPEC, 1, Wire(ctx.device), timeout_s=TIMEOUT_S)
        acks = FrameReceiver(ACK, 1, Wire(ctx.device), count=needed, timeout_s=TIMEOUT_S)
        acks_before, got = [], 0
        for k in range(n):
            if k >= max_in_flight:
                acks.recv()
                got += 1
            acks_before.append(got)
            frames.send(make_frame(k), [k])
        frames.flush()
        return acks_before
    inbox = FrameReceiver(SPEC, 0, Wire(ctx.device), count=n, timeout_s=TIMEOUT_S)
    outbox = FrameSender(ACK, 0, Wire(ctx.device), timeout_s=TIMEOUT_S)
    sums = []
    for k in range(n):
        frame, _ = inbox.recv()
        sums.append(consume(frame))
        if k < needed:
            outbox.send(torch.ones(1, dtype=torch.int64), [])
    outbox.flush()
    return sums
