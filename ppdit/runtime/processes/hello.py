"""The smallest jobs for ranks: who each rank is, and how fast it computes.

``hello`` is what a first cell runs to see the ranks a launch started (lesson 00, ``ppdit
info``, ``make gpu-check``); ``matmul_seconds`` checks that how a rank was started does not
change how fast it computes (``benchmarks/launch.py``). They live in a module, not in notebook
cells, because ranks import their worker by name.
"""

from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist

from ppdit.runtime.observe.timing import timed
from ppdit.runtime.processes.rank import RankContext


def hello(ctx: RankContext) -> dict:
    """Who am I: rank, device, backend, threads, process id, host; plus an all-reduce check."""
    x = torch.tensor([float(ctx.rank + 1)], device=ctx.wire.buffers)
    dist.all_reduce(x)
    return {"rank": ctx.rank, "world_size": ctx.world_size, "device": str(ctx.device),
            "backend": ctx.placement.backend, "threads": torch.get_num_threads(),
            "pid": os.getpid(), "host": socket.gethostname(), "all_reduce_sum": x.item()}


def matmul_seconds(ctx: RankContext, size: int = 256, n: int = 200) -> float:
    """Seconds for ``n`` ``size`` x ``size`` matmuls on one thread (see the module)."""
    torch.set_num_threads(1)
    a = torch.randn(size, size, device=ctx.device)
    a @ a  # warm
    with timed(ctx.placement) as t:
        for _ in range(n):
            a @ a
    return t.seconds
