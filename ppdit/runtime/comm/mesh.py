"""The one mesh: ranks on a grid of named axes, and every process group any axis needs.

A ``Layout`` says how many ranks each axis has; the mesh lays them out, outermost axis first,
after ``first_rank`` ranks outside it (the bring-up system's controller, rank 0)::

    rank = first_rank + ((((dp_i * step + step_i) * cfg + cfg_i) * ring + ring_i)
                         * ulysses + ulysses_i) * tp + tp_i

    step = 2, tp = 2:            TP groups {0, 1} and {2, 3} (all-reduces every block)
        stage 0:   rank 0  ==  rank 1
                     |           |        step groups {0, 2} and {1, 3}: each TP rank hands
        stage 1:   rank 2  ==  rank 3     the latent to its counterpart in the next stage

The innermost axes get the closest ranks (NVLink neighbours) because they talk most: TP every
block, Ulysses four all-to-alls a block, a ring one K/V block a hop, CFG once a step, a pipeline
once a handoff; ``dp`` (independent replicas) never.

``dist.new_group`` is a collective over the whole world, so ``Mesh.build`` makes *every* group
of *every* axis on *every* rank in one fixed order, then keeps its own: picotron's one grid and
xDiT's one call, without their module globals. A rank reaches a group by axis name,
``mesh.group("tp")``, or several, ``mesh.group("ring", "ulysses")``. Groups with the same ranks
are one group, except the pipeline's *back* group (credits from the last stage to the first,
``RankMesh.back_group``) and the two ``Lanes``, communicators of their own on purpose. Only this
module creates groups (a test checks it; the one exception is ``nccl_rules``' control group).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import product

import torch
import torch.distributed as dist


def new_group(ranks: Sequence[int]):
    """``dist.new_group`` with the world group's timeout: torch gives a new group its own
    default (NCCL's 10 minutes, gloo's 30), so a launch's bound, and NCCL's watchdog with it,
    would hold on the world alone. Collective: every rank calls it, in one order."""
    world = dist.distributed_c10d._get_default_group()
    device = torch.device("cuda" if dist.get_backend() == "nccl" else "cpu")
    return dist.new_group(list(ranks), timeout=world._get_backend(device).options._timeout)


@dataclass(frozen=True)
class Mesh:
    """A grid of ranks with named axes, outermost first; validated when made, picklable."""

    axes: tuple[tuple[str, int], ...]  # (name, size), outermost first
    first_rank: int = 0  # ranks below this one stand outside the grid (a controller)
    pipeline: str | None = None  # the axis whose neighbours hand work on (prev / next)
    joint: tuple[tuple[str, ...], ...] = ()  # several axes that also need one group together
    # ((axes), ranks per node): each line along these axes split into nodes (two-phase
    # all-to-alls: parallel.sequence.topology); None: no node groups
    nodes: tuple[tuple[str, ...], int] | None = None

    def __post_init__(self) -> None:
        names = [n for n, _ in self.axes]
        if len(set(names)) != len(names) or any(s < 1 for _, s in self.axes):
            raise ValueError(f"mesh axes {self.axes}: names must differ and sizes be >= 1")
        wanted = {a for j in self.joint for a in j} | {self.pipeline} - {None}
        if self.nodes is not None:
            wanted |= set(self.nodes[0])
        if not wanted <= set(names) or self.first_rank < 0:
            raise ValueError(f"mesh axes {names} lack {sorted(wanted - set(names))} "
                             f"(or first_rank={self.first_rank} < 0)")

    @classmethod
    def of(cls, first_rank: int = 0, **sizes: int) -> Mesh:
        """``Mesh.of(tp=4)``: axes in the order given."""
        return cls(tuple(sizes.items()), first_rank)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.axes)

    def size(self, *axes: str) -> int:
        """Ranks along ``axes`` together (every axis: the grid's ranks)."""
        sizes = dict(self.axes)
        return math.prod(sizes[a] for a in (axes or self.names))

    @property
    def world_size(self) -> int:
        """The ranks a process group needs: the outside ones, then the grid."""
        return self.first_rank + self.size()

    def coords(self, rank: int) -> dict[str, int] | None:
        """Each axis' index of a global rank, or None for a rank outside the grid."""
        local = rank - self.first_rank
        if not 0 <= local < self.size():
            return None
        out = {}
        for name, size in reversed(self.axes):
            local, out[name] = divmod(local, size)
        return {n: out[n] for n in self.names}

    def rank_of(self, coords: dict[str, int]) -> int:
        """The global rank at ``coords`` (every axis named)."""
        local = 0
        for name, size in self.axes:
            local = local * size + coords[name]
        return self.first_rank + local

    def line(self, rank: int, axes: Sequence[str]) -> list[int]:
        """The ranks that differ from ``rank`` only along ``axes``, in rank order."""
        base, sizes = self.coords(rank), dict(self.axes)
        axes = [a for a in self.names if a in axes]  # outermost first: rank order
        return [self.rank_of({**base, **dict(zip(axes, idx, strict=True))})
                for idx in product(*(range(sizes[a]) for a in axes))]

    def lines(self, axes: Sequence[str]) -> list[list[int]]:
        """Every line along ``axes``, in the order of their first rank."""
        seen, out = set(), []
        for r in range(self.first_rank, self.world_size):
            line = self.line(r, axes)
            if line[0] not in seen:
                seen.add(line[0])
                out.append(line)
        return out

    def build(self, rank: int) -> RankMesh | None:
        """Make every group of the mesh (see the module) and return this rank's view (``None``
        outside the grid: ranks above it stay idle, a smaller plan beside a larger one)."""
        if dist.get_world_size() < self.world_size:
            raise ValueError(f"{self} needs {self.world_size} ranks, but the process group has "
                             f"{dist.get_world_size()}")
        made: dict[tuple[int, ...], object] = {}
        groups = {}
        for axes in [(a,) for a in self.names] + list(self.joint):
            for line in self.lines(axes):
                if len(line) > 1 and tuple(line) not in made:
                    made[tuple(line)] = new_group(line)
                groups[(axes, line[0])] = made.get(tuple(line))
        back = {}
        if self.pipeline is not None and self.size(self.pipeline) > 1:
            for line in self.lines((self.pipeline,)):
                back[line[0]] = new_group([line[0], line[-1]])
        nodes = _node_groups(self, rank)
        coords = self.coords(rank)
        if coords is None:
            return None
        mine = {axes: g for (axes, first), g in groups.items() if first == self.line(rank, axes)[0]}
        pipe = self.line(rank, (self.pipeline,))[0] if self.pipeline else None
        return RankMesh(self, rank, coords, mine, back.get(pipe), nodes)


def _node_groups(mesh: Mesh, rank: int) -> tuple[object, object] | None:
    """Every line's (node, rail) groups, made on every rank; this rank's pair."""
    if mesh.nodes is None:
        return None
    axes, per_node = mesh.nodes
    mine = None
    for line in mesh.lines(axes):
        if per_node < 1 or len(line) % per_node:
            raise ValueError(f"ranks_per_node={per_node} must divide the {len(line)} ranks "
                             f"along {axes} (whole nodes)")
        n = len(line) // per_node
        nodes = [line[m * per_node:(m + 1) * per_node] for m in range(n)]
        rails = [[nodes[m][p] for m in range(n)] for p in range(per_node)]
        intra = [new_group(r) if len(r) > 1 else None for r in nodes]
        inter = [new_group(r) if len(r) > 1 else None for r in rails]
        if rank in line:
            node, local = divmod(line.index(rank), per_node)
            mine = (intra[node], inter[local])
    return mine


@dataclass(frozen=True)
class RankMesh:
    """One rank's place in a ``Mesh`` and the groups it talks on (None where one rank)."""

    mesh: Mesh
    rank: int
    coords: dict[str, int]
    groups: dict[tuple[str, ...], object] = field(repr=False)
    # The last stage and the first, for what travels backwards (credits): a communicator of its
    # own, so under NCCL (one ordered stream per communicator and peer) a credit never queues
    # behind a frame the other way, or a frame behind a credit. None without stages.
    back_group: object = field(default=None, repr=False)
    node_groups: tuple[object, object] | None = field(default=None, repr=False)  # (node, rail)

    def group(self, *axes: str) -> dist.ProcessGroup | None:
        """The group of the ranks that differ from this one only along ``axes`` (made by
        ``build``: one axis, or a ``joint`` of the mesh); None for a line of one rank."""
        sized = {a for a in axes if self.mesh.size(a) > 1}
        if not sized:
            return None
        for key, g in self.groups.items():
            if {a for a in key if self.mesh.size(a) > 1} == sized:
                return g
        raise ValueError(f"the mesh {self.mesh.names} has no group along {axes}: name them "
                         "in Mesh.joint")

    def index(self, *axes: str) -> int:
        """This rank's index along ``axes`` together (row-major, outermost first)."""
        out = 0
        for a in self.mesh.names:
            if a in axes:
                out = out * self.mesh.size(a) + self.coords[a]
        return out

    def size(self, *axes: str) -> int:
        return self.mesh.size(*axes)

    @property
    def stage(self) -> int:
        """My index along the pipeline axis (0 without one)."""
        return self.coords[self.mesh.pipeline] if self.mesh.pipeline else 0

    def _stage_rank(self, stage: int) -> int | None:
        """My counterpart in ``stage`` (None past either end, or without a pipeline)."""
        axis = self.mesh.pipeline
        inside = axis is not None and 0 <= stage < self.mesh.size(axis)
        return self.mesh.rank_of({**self.coords, axis: stage}) if inside else None

    @property
    def prev_rank(self) -> int | None:
        """My counterpart in the previous stage (None on the first)."""
        return self._stage_rank(self.stage - 1)

    @property
    def next_rank(self) -> int | None:
        """... in the next stage (None on the last)."""
        return self._stage_rank(self.stage + 1)

    @property
    def first_stage_rank(self) -> int:
        """My counterpart in stage 0 (credits go back to it)."""
        return self._stage_rank(0) if self.mesh.pipeline else self.rank

    @property
    def last_stage_rank(self) -> int:
        """... in the last stage."""
        pipe = self.mesh.pipeline
        return self._stage_rank(self.size(pipe) - 1) if pipe else self.rank


def world_group(rank: int, world_size: int) -> dist.ProcessGroup | None:
    """One group of every rank (collective): what a job that talks to everyone needs."""
    return Mesh.of(all=world_size).build(rank).group("all")


@dataclass(frozen=True)
class Lanes:
    """Two communicators over the same ranks, one per direction: messages to a higher rank go
    on ``up``, to a lower one on ``down``. Each carries one direction per pair, so NCCL's one
    ordered stream per communicator (``nccl_rules``) never holds a send behind a receive."""

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
    return Lanes(new_group(ranks), new_group(ranks))
