"""Failures to show safely: a rank that raises, sleeps, or issues collectives in another order
than its peer (lesson 00, lesson 15; the tests' own, in ``tests/support/workers.py``).

Each ends as a named error in bounded time, which is the point the lessons make: the launcher
re-raises a rank's exception with its rank, reaps a killed rank's peers, and a receive or a
collective without a partner hits its timeout instead of hanging the notebook."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ppdit.runtime.comm.wire import recv_tensor
from ppdit.runtime.processes.rank import RankContext


def raise_on(ctx: RankContext, bad_rank: int, message: str = "boom") -> int:
    """``bad_rank`` raises; every other rank blocks on a receive from it (and would hang)."""
    if ctx.rank == bad_rank:
        raise ValueError(message)
    recv_tensor(bad_rank, ctx.wire, timeout_s=600)
    return ctx.rank


def sleep_for(ctx: RankContext, seconds: float) -> int:
    """Every rank sleeps: a long job to interrupt (lesson 00's exercise)."""
    time.sleep(seconds)
    return ctx.rank


def mismatched_collectives(ctx: RankContext) -> int:
    """The classic multi-rank hang: two ranks issue the same two collectives in different
    orders. Each waits inside its first collective for a partner that is in another one; only
    the process group's timeout (``launch(..., pg_timeout_s=...)``) ends it, as an error."""
    x = torch.ones(4, device=ctx.wire.buffers)
    if ctx.rank == 0:
        dist.all_reduce(x)
        dist.broadcast(x, src=0)
    else:
        dist.broadcast(x, src=0)
        dist.all_reduce(x)
    return ctx.rank
