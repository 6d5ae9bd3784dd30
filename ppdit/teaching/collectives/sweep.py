"""A link measured: send/recv and all-reduce over message sizes, in interleaved rounds.

``ppdit.analysis.measure.comm_sweep`` (lesson 10) keeps the best of three runs per size and
reads latency and bandwidth off the extremes. Here every round is kept, so the lesson can quote
medians with their spread and fit ``t = α + n / β`` through all sizes at once
(``costs.fit_alpha_beta``). Rounds are interleaved: round k runs every size, starting at a
different one, and alternates which of the two operations goes first, so a slow moment of the
shared machine lands on all sizes rather than on one."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from ppdit.analysis.measure import all_reduces, ping_pong
from ppdit.runtime.observe.timing import MIN_ROUNDS, timed, warm_up_pairs
from ppdit.runtime.processes.rank import RankContext

SIZES = tuple(8 * 8**k for k in range(8))  # 8 B, 64 B, ..., 16 MiB: a decade-ish per step
TARGET_BYTES = 4e6  # per timed run: a few milliseconds of traffic, whatever the size


def iterations(nbytes: int) -> int:
    """Repetitions per timed run: 10 for small messages (a loopback trip costs tens of
    microseconds or more, so 10 last far above the clock's resolution), down to 3 for large
    ones. Depends only on the size, so both ranks agree."""
    return max(3, min(10, int(TARGET_BYTES // nbytes)))


def alpha_beta_sweep(ctx: RankContext, sizes: Sequence[int] = SIZES,
                     rounds: int = 5) -> dict | None:
    """A 2-rank worker: on rank 0 (None on rank 1), seconds per operation for every size and
    round, ``{"bytes": [...], "p2p_s": [[per round], ...], "all_reduce_s": [[...], ...]}``.
    ``p2p``: half a ``dist.send`` / ``dist.recv`` round trip (both directions take the same
    path); ``all_reduce``: ``dist.all_reduce`` on both ranks; fp32 buffers of ``size`` bytes;
    one untimed round first, after a warm-up exchange that connects the pair."""
    if ctx.world_size != 2:
        raise ValueError(f"alpha_beta_sweep needs world_size=2, got {ctx.world_size}")
    if rounds < MIN_ROUNDS:
        raise ValueError(f"rounds={rounds}: at least {MIN_ROUNDS} (ppdit.runtime.observe.timing)")
    if any(n < 4 or n % 4 for n in sizes):
        raise ValueError(f"sizes={list(sizes)}: fp32 buffers need multiples of 4 bytes")
    peer, bare = 1 - ctx.rank, ctx.wire.bare()  # raw sends: no rules
    warm_up_pairs(bare, [(0, 1)], ctx.rank)
    buffers = [torch.zeros(n // 4, device=bare.buffers) for n in sizes]

    def round_trips(x: torch.Tensor, k: int) -> None:
        ping_pong(x, ctx.rank, peer, k)

    p2p, reduced = [[] for _ in sizes], [[] for _ in sizes]
    for rnd in range(-1, rounds):  # round -1: untimed (buffers touched, sockets grown)
        start = max(rnd, 0) % len(sizes)
        for i in [(start + j) % len(sizes) for j in range(len(sizes))]:
            k = iterations(sizes[i])
            ops = [(round_trips, p2p, 2 * k), (all_reduces, reduced, k)]
            for op, into, per in (ops if rnd % 2 == 0 else ops[::-1]):
                dist.barrier()  # both ranks start together
                with timed(ctx.placement) as t:
                    op(buffers[i], k)
                if rnd >= 0:
                    into[i].append(t.seconds / per)
    return {"bytes": list(sizes), "p2p_s": p2p, "all_reduce_s": reduced} if ctx.rank == 0 else None
