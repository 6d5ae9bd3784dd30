"""Launching ranks, choosing devices, talking between ranks, and tracing what they do."""

from ppdit.runtime.device import Placement, choose_backend, placement_for
from ppdit.runtime.launch import (
    LaunchTimeout,
    RankContext,
    RankError,
    in_torchrun,
    launch,
    run_under_torchrun,
)
from ppdit.runtime.p2p import FrameReceiver, FrameSender, FrameSpec, recv_tensor, send_tensor
from ppdit.runtime.trace import RankTrace, Span, Trace, Tracer, merge

__all__ = [
    "FrameReceiver", "FrameSender", "FrameSpec", "LaunchTimeout", "Placement", "RankContext",
    "RankError", "RankTrace", "Span", "Trace", "Tracer", "choose_backend", "in_torchrun", "launch",
    "merge", "placement_for", "recv_tensor", "run_under_torchrun", "send_tensor",
]
