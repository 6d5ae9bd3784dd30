"""The collectives on live ranks, small enough to print: what each primitive leaves on every rank.

Rank r starts with p chunks whose values name their origin, ``10 (r + 1) + c`` for chunk c
(rank 0 holds 10 11 12 13, rank 1 holds 20 21 22 23, ...), as int64: every sum is exact, so
every output can be compared with ``expected_primitives`` digit for digit, and a value in an
output tells where it came from (a sum, 100 + 4c for p = 4, is no rank's value).

``ring_reduce_scatter`` and ``ring_all_gather`` build the two halves of a ring all-reduce from
point-to-point messages, each step one fused send + receive (``Wire.batch``, i.e.
``batch_isend_irecv``) so it cannot block itself under NCCL's rules."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ppdit.runtime.comm.wire import Wire, wait_for
from ppdit.runtime.processes.rank import RankContext

PRIMITIVES = ("broadcast", "reduce", "all-reduce", "reduce-scatter", "all-gather", "all-to-all")
ROOT = 0  # broadcast's source and reduce's destination
WAIT_S = 30.0  # every wait ends: a mistake is an error within seconds, not a hang
# Two orders of adding p float32 values round differently: by a few units in the last place of
# the partial sums (eps = 1.2e-7 relative; sums of 4 standard normals stay below ~16, whose ulp
# is ~1e-6). 1e-5 is well above that and far below a real error (a share added twice or
# missed is off by ~1).
SUM_ORDER_TOL = {"rtol": 1e-5, "atol": 1e-5}

# torch 2.13 renamed the tensor forms (the old names warn); torch >= 2.5 is supported.
REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

# A chunk per position, or None where a rank holds nothing defined (reduce's non-roots, the
# shards an all-gather has not yet gathered): (before, after) per primitive.
Grid = list[int | None]


def rank_input(rank: int, p: int) -> torch.Tensor:
    """Rank ``rank``'s p chunks, ``10 (rank + 1) + c``: each value names its rank and chunk."""
    return torch.tensor([10 * (rank + 1) + c for c in range(p)], dtype=torch.int64)


def primitives_worker(ctx: RankContext) -> dict[str, tuple[Grid, Grid]]:
    """Run every primitive once on this rank's ``rank_input``; (before, after) per primitive,
    as p-long lists indexed by chunk."""
    p, r = ctx.world_size, ctx.rank
    x = rank_input(r, p)
    mine = [x[r].item() if c == r else None for c in range(p)]
    out: dict[str, tuple[Grid, Grid]] = {}
    t = x.clone()
    dist.broadcast(t, src=ROOT)
    out["broadcast"] = (x.tolist(), t.tolist())
    t = x.clone()
    dist.reduce(t, dst=ROOT)  # only the root's result is defined: others may be scratch
    out["reduce"] = (x.tolist(), t.tolist() if r == ROOT else [None] * p)
    t = x.clone()
    dist.all_reduce(t)
    out["all-reduce"] = (x.tolist(), t.tolist())
    shard = torch.empty(1, dtype=x.dtype)  # (1,): chunk r of the sum
    REDUCE_SCATTER(shard, x.clone())
    out["reduce-scatter"] = (x.tolist(), [shard.item() if c == r else None for c in range(p)])
    gathered = torch.empty(p, dtype=x.dtype)  # (p,): every rank's chunk of its own index
    ALL_GATHER(gathered, x[r:r + 1].clone())
    out["all-gather"] = (list(mine), gathered.tolist())
    swapped = torch.empty(p, dtype=x.dtype)  # chunk c goes to rank c; rank r gets chunk r of all
    dist.all_to_all_single(swapped, x.clone())
    out["all-to-all"] = (x.tolist(), swapped.tolist())
    return out


def format_grid(grid: Grid) -> str:
    """"[ 10  11   ·  13]": a rank's chunks as the lesson prints them (· = nothing defined)."""
    return "[" + " ".join(f"{'·' if v is None else v:>3}" for v in grid) + "]"


def expected_primitives(p: int) -> list[dict[str, tuple[Grid, Grid]]]:
    """What ``primitives_worker`` must return on each of p ranks, computed in one process."""
    x = [rank_input(r, p).tolist() for r in range(p)]
    total = [sum(x[r][c] for r in range(p)) for c in range(p)]
    return [{"broadcast": (x[r], list(x[ROOT])),
             "reduce": (x[r], list(total) if r == ROOT else [None] * p),
             "all-reduce": (x[r], list(total)),
             "reduce-scatter": (x[r], [total[r] if c == r else None for c in range(p)]),
             "all-gather": ([x[r][r] if c == r else None for c in range(p)],
                            [x[c][c] for c in range(p)]),
             "all-to-all": (x[r], [x[c][r] for c in range(p)])} for r in range(p)]


def ring_reduce_scatter(x: torch.Tensor, rank: int, p: int, wire: Wire) -> torch.Tensor:
    """Chunk ``rank`` of the sum over ranks of ``x``, by p - 1 ring steps.

    At step s rank r sends chunk (r - s - 1) mod p to r + 1 and adds the chunk (r - s - 2) mod p
    it receives from r - 1 to its own. Chunk c is therefore summed in ring order starting at
    rank c + 1: ((x_{c+1} + x_{c+2}) + ...) + x_c, one addition per step. Chunk 0, p = 4::

        step 0: rank 1 --x1--------> rank 2, which adds x2
        step 1: rank 2 --x1+x2-----> rank 3, which adds x3
        step 2: rank 3 --x1+x2+x3--> rank 0, which adds x0: chunk 0 complete on rank 0
    """
    chunks = [c.clone() for c in x.chunk(p)]  # p contiguous chunks
    right, left = (rank + 1) % p, (rank - 1) % p
    for step in range(p - 1):
        send_c, recv_c = (rank - step - 1) % p, (rank - step - 2) % p
        partial = torch.empty_like(chunks[recv_c])
        for work in wire.batch([("send", chunks[send_c], right), ("recv", partial, left)]):
            wait_for(work, WAIT_S, f"ring reduce-scatter step {step}")
        chunks[recv_c] = partial + chunks[recv_c]  # the sum so far, then this rank's share
    return chunks[rank]


def ring_all_gather(mine: torch.Tensor, rank: int, p: int, wire: Wire) -> torch.Tensor:
    """Every rank's chunk, concatenated in rank order, by p - 1 ring steps: at step s rank r
    forwards chunk (r - s) mod p to r + 1 and receives chunk (r - s - 1) mod p from r - 1."""
    chunks: list[torch.Tensor | None] = [None] * p
    chunks[rank] = mine.contiguous()
    right, left = (rank + 1) % p, (rank - 1) % p
    for step in range(p - 1):
        send_c, recv_c = (rank - step) % p, (rank - step - 1) % p
        got = torch.empty_like(mine)
        for work in wire.batch([("send", chunks[send_c], right), ("recv", got, left)]):
            wait_for(work, WAIT_S, f"ring all-gather step {step}")
        chunks[recv_c] = got
    return torch.cat(chunks)


def composition_worker(ctx: RankContext, numel: int, integers: bool,
                       seed: int = 0) -> dict[str, torch.Tensor]:
    """Reduce-scatter then all-gather (the backend's, and the ring built from messages) against
    ``dist.all_reduce``, on this rank's input. ``integers``: float32 values that are small
    integers, so every sum is exact in any order; else standard normal floats, whose sums
    depend on the order of the additions."""
    p, r = ctx.world_size, ctx.rank
    if numel % p:
        raise ValueError(f"numel={numel} must divide into p={p} equal chunks")
    g = torch.Generator().manual_seed(seed * 1000 + r)
    x = (torch.randint(-1000, 1000, (numel,), generator=g).float() if integers
         else torch.randn(numel, generator=g))
    reduced = x.clone()
    dist.all_reduce(reduced)
    shard = torch.empty(numel // p)
    REDUCE_SCATTER(shard, x.clone())
    backend = torch.empty(numel)
    ALL_GATHER(backend, shard)
    ring = ring_all_gather(ring_reduce_scatter(x, r, p, ctx.wire), r, p, ctx.wire)
    return {"input": x, "all_reduce": reduced, "backend_rs_ag": backend, "ring_rs_ag": ring}


def exchange_worker(ctx: RankContext, fused: bool) -> list[int]:
    """Ranks 2k and 2k + 1 swap a small tensor, each posting its receive *before* its send.
    Unfused: a plain ``irecv`` then ``isend``. Gloo runs each on its own, so it works; under
    NCCL's rules both go into one ordered queue per peer, so each rank's send waits behind its
    own receive, which waits for the peer's send: a deadlock on both ranks. Fused: one
    ``batch_isend_irecv`` (NCCL's ``ncclGroupStart/End``), so neither stands before the other."""
    if ctx.world_size % 2:
        raise ValueError(f"exchange_worker pairs ranks 2k and 2k + 1: world_size="
                         f"{ctx.world_size} must be even")
    peer = ctx.rank ^ 1  # 0 <-> 1, 2 <-> 3, ...
    mine, theirs = torch.full((4,), ctx.rank, dtype=torch.int64), torch.empty(4, dtype=torch.int64)
    if fused:
        works = ctx.wire.batch([("recv", theirs, peer), ("send", mine, peer)])
    else:
        works = [ctx.wire.recv(theirs, peer), ctx.wire.send(mine, peer)]
    for work in works:
        wait_for(work, WAIT_S, "exchange")
    return theirs.tolist()
