"""Small workers for checking a setup and for showing failures safely (notebooks, tests, bench).

They live in a module, not in notebook cells, because spawn pickles workers by name.
"""

from __future__ import annotations

import os
import signal
import socket
import statistics
import time

import torch
import torch.distributed as dist

from ppdit.runtime.launch import RankContext
from ppdit.runtime.p2p import (
    FrameReceiver,
    FrameSender,
    FrameSpec,
    recv_tensor,
    send_tensor,
    wire_device,
)
from ppdit.runtime.timing import timed, warm_up_pairs


def hello(ctx: RankContext) -> dict:
    """Who am I: rank, device, backend, threads, process id, host; plus an all-reduce check."""
    x = torch.tensor([float(ctx.rank + 1)], device=wire_device(ctx.device, ctx.placement.staged))
    dist.all_reduce(x)
    return {"rank": ctx.rank, "world_size": ctx.world_size, "device": str(ctx.device),
            "backend": ctx.placement.backend, "threads": torch.get_num_threads(),
            "pid": os.getpid(), "host": socket.gethostname(), "all_reduce_sum": x.item()}



def matmul_seconds(ctx: RankContext, size: int = 256, n: int = 200) -> float:
    """Seconds for ``n`` ``size`` x ``size`` matmuls on one thread: whether how a rank was
    started (forked from a server, or a fresh interpreter) changes how fast it computes."""
    torch.set_num_threads(1)
    a = torch.randn(size, size, device=ctx.device)
    a @ a  # warm
    with timed(ctx.placement) as t:
        for _ in range(n):
            a @ a
    return t.seconds

def raise_on(ctx: RankContext, bad_rank: int, message: str = "boom") -> int:
    """``bad_rank`` raises; every other rank blocks on a receive from it (and would hang)."""
    if ctx.rank == bad_rank:
        raise ValueError(message)
    recv_tensor(bad_rank, **ctx.wire, timeout_s=600)
    return ctx.rank


def die_on(ctx: RankContext, bad_rank: int) -> int:
    """``bad_rank`` is killed with SIGKILL (no Python cleanup at all); the others wait on it."""
    if ctx.rank == bad_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    recv_tensor(bad_rank, **ctx.wire, timeout_s=600)
    return ctx.rank


def sleep_for(ctx: RankContext, seconds: float) -> int:
    """Every rank sleeps: a long job to interrupt (lesson 00's exercise)."""
    time.sleep(seconds)
    return ctx.rank


def recv_never(ctx: RankContext, timeout_s: float = 2.0) -> int:
    """Rank 1 waits for a tensor rank 0 never sends: the P2P timeout turns it into an error."""
    if ctx.rank == 1:
        recv_tensor(0, **ctx.wire, timeout_s=timeout_s)
    else:
        time.sleep(timeout_s + 5)  # stay alive so the failure is the timeout, not a dead peer
    return ctx.rank


def handoff_pingpong(ctx: RankContext, shape: tuple[int, ...], rounds: int = 7,
                     iters: int = 50) -> dict[str, list[float]] | None:
    """One-way latency of a latent handoff, three ways, interleaved round by round (rank 0 gets
    the numbers, in seconds per one-way trip):

    * ``bare``: ``dist.send`` / ``dist.recv`` of the tensor itself, the floor;
    * ``frame``: ppdit's handoff (``FrameSender`` / ``FrameReceiver``: one message, payload +
      metadata). As in a pipeline stage, the outgoing latent is already in the claimed frame
      (a stage's last step writes it there), so no copy is timed that the stage would not make;
    * ``header+payload``: ``send_tensor`` / ``recv_tensor``, which describe every message.
    """
    if ctx.world_size != 2:
        raise ValueError(f"handoff_pingpong needs world_size=2, got {ctx.world_size}")
    # The bare and described trips move the wire's tensor (host memory when staged); the frame
    # trip includes the staging copies a pipeline stage pays.
    x = torch.randn(shape, device=wire_device(ctx.device, ctx.placement.staged))
    peer = 1 - ctx.rank
    spec = FrameSpec(tuple(shape), x.dtype, meta_slots=2)
    tx = FrameSender(spec, peer, **ctx.wire)
    rx = FrameReceiver(spec, peer, **ctx.wire)
    ways = {"bare": _bare, "frame": _frame, "header+payload": _described}
    out: dict[str, list[float]] = {k: [] for k in ways}
    warm_up_pairs(ctx.placement, [(0, 1)], ctx.rank, rules=ctx.rules)  # NCCL's pair set-up
    for _ in range(rounds):
        for name, trip in ways.items():
            dist.barrier()
            with timed(ctx.placement) as t:
                for i in range(iters):
                    trip(ctx.rank, peer, x, tx, rx, i)
            out[name].append(t.seconds / iters / 2)
    return out if ctx.rank == 0 else None


def _bare(rank, peer, x, tx, rx, i):
    if rank == 0:
        dist.send(x, peer)
        dist.recv(x, peer)
    else:
        dist.recv(x, peer)
        dist.send(x, peer)


def _frame(rank, peer, x, tx, rx, i):
    if rank == 0:
        tx.send(tx.claim(), [i, 0])
        tx.flush()
        rx.recv()
    else:
        rx.recv()
        tx.send(tx.claim(), [i, 1])
        tx.flush()


def _described(rank, peer, x, tx, rx, i):
    if rank == 0:
        send_tensor(x, peer)
        recv_tensor(peer, device=x.device)
    else:
        send_tensor(recv_tensor(peer, device=x.device), peer)


def summarize_pingpong(times: dict[str, list[float]]) -> dict[str, float]:
    """Median one-way milliseconds per way (medians resist the other core's noise)."""
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def mismatched_collectives(ctx: RankContext) -> int:
    """The classic multi-rank hang: two ranks issue the same two collectives in different
    orders. Each waits inside its first collective for a partner that is in another one; only
    the process group's timeout (``launch(..., pg_timeout_s=...)``) ends it, as an error."""
    x = torch.ones(4, device=wire_device(ctx.device, ctx.placement.staged))
    if ctx.rank == 0:
        dist.all_reduce(x)
        dist.broadcast(x, src=0)
    else:
        dist.broadcast(x, src=0)
        dist.all_reduce(x)
    return ctx.rank
