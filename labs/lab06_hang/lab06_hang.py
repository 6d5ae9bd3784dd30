"""Lab 06: find and fix the hang (see README.md)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ppdit.runtime.comm.mesh import build_lanes
from ppdit.runtime.comm.wire import FrameReceiver, FrameSender, FrameSpec, wait_for

# The checker makes every send wait for its receive (all NCCL promises), whatever its size.
SPEC = FrameSpec((80, 64), torch.float32, meta_slots=1)  # 80 x 64 float32 = 20 KiB
ACK = FrameSpec((1,), torch.int64, meta_slots=0)  # 8 bytes
TIMEOUT_S = 20.0  # for every wait: a hang the rules do not recognise ends here, named


def make_frame(k: int) -> torch.Tensor:
    """Frame ``k``'s payload: what rank 0 sends, in order k = 0, 1, ..."""
    numel = SPEC.raw_payload_nbytes // 4
    return torch.arange(numel, dtype=torch.float32).view(SPEC.shape) + 1000 * k


def consume(frame: torch.Tensor) -> float:
    """Rank 1's work on one frame (here: its checksum). Call it once per frame, in order, as soon
    as the frame has arrived; the checker watches when you call it."""
    return float(frame.double().sum())


def relay_worker(ctx, n: int, max_in_flight: int) -> list:
    """Part 1. Rank 0: for each frame k, how many acknowledgements it had received before
    sending frame k. Rank 1: ``consume(frame)`` of every frame, in order."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 06 part 1: the relay, fixed")
    # END YOUR SOLUTION


def relay_one_communicator(ctx, n: int, max_in_flight: int) -> list:
    """Part 2. The same relay, the same results, with every message on the default group."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 06 part 2: the relay on one communicator")
    # END YOUR SOLUTION


__all__ = ["ACK", "SPEC", "TIMEOUT_S", "FrameReceiver", "FrameSender", "build_lanes", "consume",
           "dist", "make_frame", "relay_one_communicator", "relay_worker", "wait_for"]
