"""Failures to show safely: a rank that raises, dies, sleeps, waits for a message that never
comes, or issues collectives in another order than its peer (lesson 00, lesson 15, the tests).

Each ends as a named error in bounded time, which is the point the lessons make: the launcher
re-raises a rank's exception with its rank, reaps a killed rank's peers, and a receive or a
collective without a partner hits its timeout instead of hanging the notebook."""

from __future__ import annotations

import os
import signal
import time

import torch
import torch.distributed as dist

from ppdit.runtime.comm.wire import recv_tensor
from ppdit.runtime.observe.timing import exchange
from ppdit.runtime.processes.rank import RankContext


def raise_on(ctx: RankContext, bad_rank: int, message: str = "boom") -> int:
    """``bad_rank`` raises; every other rank blocks on a receive from it (and would hang)."""
    if ctx.rank == bad_rank:
        raise ValueError(message)
    recv_tensor(bad_rank, ctx.wire, timeout_s=600)
    return ctx.rank


def die_on(ctx: RankContext, bad_rank: int) -> int:
    """``bad_rank`` is killed with SIGKILL (no Python cleanup at all); the others wait on it."""
    if ctx.rank == bad_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    recv_tensor(bad_rank, ctx.wire, timeout_s=600)
    return ctx.rank


def sleep_for(ctx: RankContext, seconds: float) -> int:
    """Every rank sleeps: a long job to interrupt (lesson 00's exercise)."""
    time.sleep(seconds)
    return ctx.rank


def recv_never(ctx: RankContext, timeout_s: float = 2.0) -> int:
    """Rank 1 waits for a tensor rank 0 never sends: the P2P timeout turns it into an error.
    (One message each way first: NCCL builds a pair's communicator at its first operation,
    which blocks until both ranks have posted one, whatever the receive's timeout says.)"""
    exchange(1 - ctx.rank, ctx.wire)
    if ctx.rank == 1:
        recv_tensor(0, ctx.wire, timeout_s=timeout_s)
    else:
        time.sleep(timeout_s + 5)  # stay alive so the failure is the timeout, not a dead peer
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
