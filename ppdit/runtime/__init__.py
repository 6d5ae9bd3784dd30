"""Ranks: how they start and end, where they compute, how they talk, what they record.

    processes/   starting, keeping and ending rank processes: ``launch``, the live ``RankPool``,
                 a rank's own life (``rank``), how it starts (``start``: forked from a server or
                 a fresh interpreter), joining across hosts (``hosts``), ``hello``
    comm/        the one ``mesh`` (every process group, made from a grid of named axes) and the
                 one ``wire`` (point-to-point messages, with NCCL's rules on gloo: ``nccl_rules``)
    observe/     what ranks record: spans on a common clock (``trace``), the one timing rule
                 (``timing``), peak memory (``memory``)
    device.py    the one placement decision (CPU + gloo or CUDA + NCCL, and why)
    fit.py       whether ranks sharing a device can hold their weights
    compile_cache.py  torch.compile's cache, kept in the project
    rounds.py    several plans side by side in one launch, interleaved round by round

Importing any of it starts no process: the fork server CPU ranks start from
(``ppdit._fork_server``) starts with the first launch or pool, or earlier on ``warm()``.
"""

from ppdit._fork_server import start_early as warm
from ppdit._spawn_entry import in_torchrun
from ppdit.runtime.comm.wire import FrameReceiver, FrameSender, FrameSpec, recv_tensor, send_tensor
from ppdit.runtime.device import Placement, PlacementDecision, decide_placement
from ppdit.runtime.observe.trace import RankTrace, Span, Trace, Tracer, merge
from ppdit.runtime.processes.launch import launch
from ppdit.runtime.processes.pool import LaunchTimeout, RankError, RankPool, ranks
from ppdit.runtime.processes.rank import RankContext, run_under_torchrun

__all__ = ["FrameReceiver", "FrameSender", "FrameSpec", "LaunchTimeout", "Placement",
           "PlacementDecision", "RankContext", "RankError", "RankPool", "RankTrace", "Span",
           "Trace", "Tracer", "decide_placement", "in_torchrun", "launch", "merge", "ranks",
           "recv_tensor", "run_under_torchrun", "send_tensor", "warm"]
