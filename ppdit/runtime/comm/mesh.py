"""How ranks are arranged (``ParallelDims``) and the process groups each rank talks on.

A world of ranks is laid out as ``dp x pp x tp`` (torchtitan's ``ParallelDims``, minus what an
inference repo does not need), optionally after ``first_rank`` ranks that stand outside it (the
bring-up system's controller, rank 0)::

    rank = first_rank + (dp_rank * pp + pp_rank) * tp + tp_rank

    dp = 1, pp = 2, tp = 2:      TP group (all-reduces every block)
        stage 0:   rank 0  ==  rank 1
                     |           |        PP groups {0, 2} and {1, 3}: each TP rank hands the
        stage 1:   rank 2  ==  rank 3     latent to its counterpart in the next stage

TP gets the closest ranks (consecutive ranks: on a GPU node, NVLink neighbours) because it
talks every block; PP talks once per handoff; dp (independent replicas) never talks.

``dist.new_group`` is itself a collective over the whole world, so *every* rank creates *every*
group in the same order, including groups it is not a member of (``build_groups`` does), then
keeps its own. This module is the only place ppdit creates groups.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist


@dataclass(frozen=True)
class ParallelDims:
    """A ``dp x pp x tp`` arrangement of ``world_size`` ranks, validated when made."""

    pp: int  # pipeline stages
    tp: int  # ranks per stage: one tensor-parallel group each
    world_size: int  # must be first_rank + dp * pp * tp
    dp: int = 1  # independent replicas of the whole pipeline
    first_rank: int = 0  # ranks below this one are outside the arrangement (a controller)

    def __post_init__(self) -> None:
        if min(self.pp, self.tp, self.dp) < 1 or self.first_rank < 0:
            raise ValueError(f"dp={self.dp}, pp={self.pp} and tp={self.tp} must be >= 1 and "
                             f"first_rank={self.first_rank} >= 0")
        if self.first_rank + self.dp * self.pp * self.tp != self.world_size:
            raise ValueError(
                f"first_rank + dp x pp x tp must equal the world size: {self.first_rank} + "
                f"{self.dp} x {self.pp} x {self.tp} = "
                f"{self.first_rank + self.dp * self.pp * self.tp}, but world_size = "
                f"{self.world_size}")

    def coords(self, rank: int) -> tuple[int, int, int] | None:
        """(dp_rank, pp_rank, tp_rank) of a global rank, or None if it stands outside."""
        local = rank - self.first_rank
        if not 0 <= local < self.dp * self.pp * self.tp:
            return None
        replica, rest = divmod(local, self.pp * self.tp)
        return (replica, *divmod(rest, self.tp))

    def rank_of(self, dp_rank: int, pp_rank: int, tp_rank: int) -> int:
        """The global rank at these coordinates."""
        return self.first_rank + (dp_rank * self.pp + pp_rank) * self.tp + tp_rank

    def tp_ranks(self, dp_rank: int, pp_rank: int) -> list[int]:
        """Global ranks of one stage's TP group."""
        return [self.rank_of(dp_rank, pp_rank, j) for j in range(self.tp)]

    def pp_ranks(self, dp_rank: int, tp_rank: int) -> list[int]:
        """Global ranks of one pipeline (a TP rank and its counterparts in every stage)."""
        return [self.rank_of(dp_rank, s, tp_rank) for s in range(self.pp)]


@dataclass(frozen=True)
class RankGroups:
    """One rank's place in a ``ParallelDims`` arrangement and the groups it talks on."""

    rank: int
    dp_rank: int
    pp_rank: int  # stage index
    tp_rank: int  # index inside the stage's TP group
    tp_group: dist.ProcessGroup | None  # this stage's ranks (None when tp == 1)
    pp_group: dist.ProcessGroup | None  # this rank's pipeline (None: use the default group)
    # The last stage and the first, for what travels backwards (credits): a communicator of its
    # own, so under NCCL (one ordered stream per communicator and peer) a credit never queues
    # behind a frame the other way, or a frame behind a credit. None when pp == 1.
    back_group: dist.ProcessGroup | None
    prev_rank: int | None  # global rank of the counterpart in the previous stage
    next_rank: int | None  # ... in the next stage
    first_stage_rank: int  # the counterpart in stage 0 (credits go back to it)
    last_stage_rank: int  # ... in the last stage

    @property
    def is_first_stage(self) -> bool:
        return self.prev_rank is None

    @property
    def is_last_stage(self) -> bool:
        return self.next_rank is None


def build_groups(dims: ParallelDims, rank: int) -> RankGroups | None:
    """Create every TP and PP group on every rank in the same order; return this rank's.

    Call it on every rank of the world (also ranks outside the arrangement, which get
    ``None``; an arrangement smaller than the world leaves the ranks above it idle, as when a
    1-stage plan runs beside a 2-stage one). With tp == 1 no TP group is made; with a single
    pipeline starting at rank 0, P2P uses the default group and no PP group is made either.
    """
    if dist.get_world_size() < dims.world_size:
        raise ValueError(f"{dims} needs {dims.world_size} ranks, but the process group has "
                         f"{dist.get_world_size()}")
    stages = [(d, s) for d in range(dims.dp) for s in range(dims.pp)]
    pipes = [(d, j) for d in range(dims.dp) for j in range(dims.tp)]
    tp_groups = ({ds: dist.new_group(dims.tp_ranks(*ds)) for ds in stages}
                 if dims.tp > 1 else {})
    one_pipeline = dims.first_rank == 0 and dims.dp == 1 and dims.tp == 1
    pp_groups = ({} if one_pipeline or dims.pp == 1 else
                 {dj: dist.new_group(dims.pp_ranks(*dj)) for dj in pipes})
    back_groups = ({} if dims.pp == 1 else  # first and last stage: ranks in increasing order
                   {dj: dist.new_group(dims.pp_ranks(*dj)[::dims.pp - 1]) for dj in pipes})
    coords = dims.coords(rank)
    if coords is None:
        return None
    d, s, j = coords
    return RankGroups(
        rank, d, s, j, tp_groups.get((d, s)), pp_groups.get((d, j)), back_groups.get((d, j)),
        dims.rank_of(d, s - 1, j) if s > 0 else None,
        dims.rank_of(d, s + 1, j) if s < dims.pp - 1 else None,
        dims.rank_of(d, 0, j), dims.rank_of(d, dims.pp - 1, j))


@dataclass(frozen=True)
class Lanes:
    """Two communicators over the same ranks, one per direction: messages to a higher rank go
    on ``up``, to a lower one on ``down``.

    NCCL runs the un-batched sends and receives between two ranks on one ordered stream per
    communicator. Traffic both ways on one communicator then deadlocks as soon as a rank posts
    a receive ahead of a send its peer is waiting for (``ppdit.runtime.comm.nccl_rules``). On a lane
    each pair carries one direction only, sender and receiver post in the same order, and a
    queued receive can never stand in front of a send.
    """

    up: dist.ProcessGroup
    down: dist.ProcessGroup

    def between(self, src: int, dst: int) -> dist.ProcessGroup:
        """The group a message from ``src`` to ``dst`` travels on (both ends ask this)."""
        if src == dst:
            raise ValueError(f"rank {src} has no lane to itself")
        return self.up if dst > src else self.down


def build_lanes(ranks: list[int] | None = None) -> Lanes:
    """Create the two lanes over ``ranks`` (default: the world). Collective: every rank of
    the world calls it, in the same order as every other group."""
    ranks = sorted(ranks) if ranks is not None else list(range(dist.get_world_size()))
    return Lanes(dist.new_group(ranks), dist.new_group(ranks))


@dataclass(frozen=True)
class SPDims:
    """A ``cfg x ring x ulysses`` arrangement of sequence-parallel ranks (xDiT's USP mesh, with
    CFG-parallel outside it)::

        rank = (cfg_index * ring + ring_index) * ulysses + ulysses_index

        cfg = 1, ring = 2, ulysses = 2:     Ulysses groups {0, 1} and {2, 3} (all-to-alls, 4
            ring 0:  rank 0 == rank 1       per layer: the closest ranks, one node), ring
                       |         |          groups {0, 2} and {1, 3} (one K/V block per hop:
            ring 1:  rank 2 == rank 3       fine across nodes); CFG pairs talk once per step.

    The tokens are split over the ``ulysses x ring`` ranks of a CFG branch in rank order, so a
    Ulysses group holds a contiguous run of tokens: the block its ring rank passes on.
    """

    ulysses: int = 1
    ring: int = 1
    cfg: int = 1  # 2: the conditional and unconditional halves on two branches

    def __post_init__(self) -> None:
        if min(self.ulysses, self.ring) < 1 or self.cfg not in (1, 2):
            raise ValueError(f"ulysses={self.ulysses} and ring={self.ring} must be >= 1 and "
                             f"cfg={self.cfg} 1 or 2")

    @property
    def degree(self) -> int:
        """Ranks that share one forward's tokens."""
        return self.ulysses * self.ring

    @property
    def world_size(self) -> int:
        return self.cfg * self.degree

    def coords(self, rank: int) -> tuple[int, int, int] | None:
        """(cfg_index, ring_index, ulysses_index), or None for a rank outside."""
        if not 0 <= rank < self.world_size:
            return None
        branch, rest = divmod(rank, self.degree)
        return (branch, *divmod(rest, self.ulysses))

    def rank_of(self, c: int, r: int, u: int) -> int:
        return (c * self.ring + r) * self.ulysses + u


@dataclass(frozen=True)
class SPGroups:
    """One rank's place in an ``SPDims`` mesh and its groups (None where an axis is 1; with one
    axis of size > 1 its group is the branch's ``sp_group`` itself: no duplicate communicator)."""

    cfg_index: int
    ring_index: int
    ulysses_index: int
    sp_group: dist.ProcessGroup | None  # every rank of my CFG branch: the token all-gather
    ulysses_group: dist.ProcessGroup | None
    ring_group: dist.ProcessGroup | None
    cfg_group: dist.ProcessGroup | None  # my counterpart in the other branch and me
    plan_group: dist.ProcessGroup | None  # every rank of the mesh (with cfg = 1: sp_group)

    @property
    def sp_index(self) -> int:
        """My index among my branch's ranks: which token slice is mine."""
        return dist.get_rank(self.sp_group) if self.sp_group is not None else 0


def build_sp_groups(dims: SPDims, rank: int) -> SPGroups | None:
    """Create every group of the mesh on every rank, in the same order; return this rank's
    (``None`` for a rank outside the mesh, as ``build_groups``)."""
    if dist.get_world_size() < dims.world_size:
        raise ValueError(f"{dims} needs {dims.world_size} ranks, but the process group has "
                         f"{dist.get_world_size()}")
    u_n, r_n, c_n = dims.ulysses, dims.ring, dims.cfg
    sp = {c: _group([dims.rank_of(c, r, u) for r in range(r_n) for u in range(u_n)])
          for c in range(c_n)}
    both = u_n > 1 and r_n > 1  # else the one axis of size > 1 is the branch's sp group
    uly = {(c, r): _group([dims.rank_of(c, r, u) for u in range(u_n)])
           for c in range(c_n) for r in range(r_n)} if both else {}
    ring = {(c, u): _group([dims.rank_of(c, r, u) for r in range(r_n)])
            for c in range(c_n) for u in range(u_n)} if both else {}
    cfg = {(r, u): _group([dims.rank_of(c, r, u) for c in range(c_n)])
           for r in range(r_n) for u in range(u_n)}
    whole = _group(list(range(dims.world_size))) if c_n > 1 else None
    coords = dims.coords(rank)
    if coords is None:
        return None
    c, r, u = coords
    return SPGroups(c, r, u, sp[c],
                    uly.get((c, r), sp[c] if u_n > 1 else None),
                    ring.get((c, u), sp[c] if r_n > 1 else None), cfg[(r, u)],
                    whole if c_n > 1 else sp[c])


def _group(ranks: list[int]) -> dist.ProcessGroup | None:
    """A group over ``ranks`` (collective over the world), or None for a single rank."""
    return dist.new_group(ranks) if len(ranks) > 1 else None


__all__ = ["Lanes", "ParallelDims", "RankGroups", "SPDims", "SPGroups", "build_groups",
           "build_lanes", "build_sp_groups"]
