"""Launching ranks, choosing devices, arranging ranks into groups (``mesh``), talking between
ranks (``p2p``), tracing what they do, and running plans side by side (``rounds``)."""

from ppdit._fork_server import start_early

start_early()  # CPU ranks fork from it: its imports run while this process goes on with its own

from ppdit.runtime.device import Placement, PlacementDecision, decide_placement  # noqa: E402
from ppdit.runtime.launch import (  # noqa: E402
    LaunchTimeout,
    RankContext,
    RankError,
    in_torchrun,
    launch,
    run_under_torchrun,
)
from ppdit.runtime.p2p import (  # noqa: E402
    FrameReceiver,
    FrameSender,
    FrameSpec,
    recv_tensor,
    send_tensor,
)
from ppdit.runtime.pool import RankPool, ranks  # noqa: E402
from ppdit.runtime.trace import RankTrace, Span, Trace, Tracer, merge  # noqa: E402

__all__ = [
    "FrameReceiver",
    "FrameSender",
    "FrameSpec",
    "LaunchTimeout",
    "Placement",
    "PlacementDecision",
    "RankContext",
    "RankError",
    "RankPool",
    "RankTrace",
    "Span",
    "Trace",
    "Tracer",
    "decide_placement",
    "in_torchrun",
    "launch",
    "merge",
    "ranks",
    "recv_tensor",
    "run_under_torchrun",
    "send_tensor",
]
