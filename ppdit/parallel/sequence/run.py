"""Sequence parallelism from the caller's side: a plan, what every rank does with it, the launch.

Every rank holds the whole model and runs every step of every request with its token slice
(``ulysses.sp_forward``), its self-attention by Ulysses, ring attention or both (USP); the
shared ``Denoiser`` applies the same update to the same gathered velocity on every rank, so
every rank ends with the whole latent. With ``cfg_parallel`` two such branches run the two
halves of each guided step and exchange their velocities (``cfg.halves``), xDiT's CFG x USP.
The plan runs seeded presets (the lessons) or a pipeline folder with its scheduler and prompts
(``ppdit generate --layout sp``) alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import torch

from ppdit.attention import use_diffusers_attention
from ppdit.checkpoint.solver import plan_denoiser
from ppdit.checkpoint.source import ModelPlan, ModelSource
from ppdit.parallel.cfg.halves import cfg_parallel_step
from ppdit.parallel.fsdp.load import load_sharded
from ppdit.parallel.fsdp.shard import local_parameter_bytes, shard_blocks, trace_gathers
from ppdit.parallel.sequence.comms import A2ACounter, even_split
from ppdit.parallel.sequence.ring import Ring, install_ring
from ppdit.parallel.sequence.topology import Hierarchy, build_hierarchy
from ppdit.parallel.sequence.ulysses import check_sp_degree, install_ulysses, sp_forward
from ppdit.parallel.sequence.usp import install_usp
from ppdit.parallel.sequence.vmajor import VMajor
from ppdit.runtime.comm.mesh import SPDims, SPGroups, build_sp_groups
from ppdit.runtime.observe.trace import Trace, Tracer
from ppdit.runtime.processes.rank import RankContext
from ppdit.runtime.rounds import PlanRuns, ReplicatedRunner, run_side_by_side
from ppdit.sampler import CFG_MODES, Conditioning, Request, SamplingConfig, StepState

SP_ATTENTION = ("ulysses", "ring", "usp")


@dataclass(frozen=True)
class SPPlan(ModelPlan):
    """Requests generated with the blocks sequence-parallel over ``degree`` ranks."""

    degree: int = 2
    requests: tuple[Request, ...] = (Request(0, 0),)
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(num_steps=4))
    source: ModelSource = field(default_factory=ModelSource)
    latent_shape: tuple[int, ...] | None = None  # None: the source's default
    v_first: bool = True  # V's all-to-all issued before the Q/K work (CoCoDiff; Ulysses only)
    # "ulysses": all-to-alls to a head split (the degree must divide the heads); "ring": K/V
    # blocks around the ring, the token split kept (any head count: ring.py); "usp": Ulysses
    # groups of degree / ring_degree ranks joined by a ring of ring_degree (usp.py)
    attention: str = "ulysses"
    ring_degree: int | None = None  # "usp" only
    cfg_parallel: bool = False  # True: two branches of ``degree`` ranks, one per CFG half
    # Ulysses only: the all-to-alls in two phases over nodes of this many ranks (topology.py,
    # CoCoDiff's topology-aware all-to-all); None: flat
    ranks_per_node: int | None = None
    # Ulysses only: V's all-to-all sends only the token rows whose relative change since they
    # were last sent exceeds this (vmajor.py, CoCoDiff's V-Major); None: every row, every step
    v_major: float | None = None
    # every block's weights sharded over all the plan's ranks (FSDP2, parallel/fsdp): each
    # rank holds 1/world of them, gathered block by block (Wan's recipe: FSDP beside Ulysses)
    fsdp: bool = False
    solver: str = "euler"  # or "folder": the source folder's scheduler
    cfg: str = "batched"  # or "split": WanPipeline's two forwards
    prompts: tuple[Conditioning, ...] | None = None  # one per request; None: seeded stand-ins
    report_steps: bool = False  # rank 0 emits ("step", i) events (a progress bar)

    def __post_init__(self) -> None:
        if self.attention not in SP_ATTENTION:
            raise ValueError(f"attention={self.attention!r} is not one of {SP_ATTENTION}")
        if self.attention == "usp":
            r = self.ring_degree
            if r is None or r < 2 or self.degree % r or self.degree // r < 2:
                raise ValueError(f"attention='usp' needs ring_degree >= 2 dividing degree="
                                 f"{self.degree} with a Ulysses degree >= 2 left, got "
                                 f"ring_degree={r} (one axis alone: 'ulysses' or 'ring')")
        elif self.ring_degree is not None:
            raise ValueError(f"ring_degree={self.ring_degree} is for attention='usp' only")
        if self.v_major is not None and (self.attention != "ulysses" or self.v_major < 0):
            raise ValueError(f"v_major={self.v_major} needs attention='ulysses' (got "
                             f"{self.attention!r}) and a threshold >= 0")
        n = self.ranks_per_node
        if n is not None and (self.attention != "ulysses" or n < 1 or self.degree % n):
            raise ValueError(f"ranks_per_node={n} needs attention='ulysses' (got "
                             f"{self.attention!r}) and must divide degree={self.degree}")
        if self.dims.ulysses > 1:
            check_sp_degree(self.preset.num_heads, self.dims.ulysses)
        self.check_workload()
        if self.cfg not in CFG_MODES:
            raise ValueError(f"cfg={self.cfg!r} is not one of {CFG_MODES}")
        if self.cfg_parallel and (not self.sampling.uses_cfg
                                  or self.sampling.guidance_steps is not None):
            raise ValueError(f"CFG-parallel needs guidance on every step (guidance_scale != 1, "
                             f"guidance_steps None), got {self.sampling}: without it there is "
                             "no second half")
        tokens = self.preset.num_tokens(self.shape)
        if self.degree > tokens:
            raise ValueError(f"degree={self.degree} exceeds the {tokens} tokens: sequence "
                             "parallelism needs at least one token per rank")


    @property
    def dims(self) -> SPDims:
        """The mesh: Ulysses x ring ranks per forward, times the CFG branches."""
        ring = {"ulysses": 1, "ring": self.degree}.get(self.attention, self.ring_degree)
        return SPDims(ulysses=self.degree // ring, ring=ring, cfg=2 if self.cfg_parallel else 1)

    @property
    def world_size(self) -> int:
        """Ranks the plan runs on."""
        return self.dims.world_size


class SPRunner(ReplicatedRunner):
    """Every SP plan of a side-by-side job on one rank (each rank holds the whole model)."""

    @staticmethod
    def loads_shards(plans: tuple) -> bool:
        """Every plan shards a folder's weights (FSDP): they are read once the groups exist."""
        return all(p.fsdp and p.source.folder is not None for p in plans)

    def __init__(self, ctx: RankContext, plans: Sequence[SPPlan]):
        super().__init__(ctx, plans)
        # every plan's groups, every rank creating every group in order (runtime.comm.mesh)
        self.groups = [build_sp_groups(p.dims, ctx.rank) for p in plans]
        self.hierarchies = [_hierarchy(p, ctx.rank) for p in plans]
        self.vmajors = [None if p.v_major is None else VMajor(p.v_major) for p in plans]
        self.load_peak_bytes = 0  # tensor bytes live at once while reading the shards
        if any(p.fsdp for p in plans):
            self._shard(plans)

    def _shard(self, plans: Sequence[SPPlan]) -> None:
        """FSDP over the plan's ranks: every plan of the job must want it on the same mesh
        (the one model of a rank is sharded in place)."""
        if len({(p.fsdp, p.dims) for p in plans}) > 1:
            raise ValueError("FSDP shards the rank's one model in place: every plan of a job "
                             f"must ask for it on the same mesh, got {[p.dims for p in plans]}")
        if self.ctx.placement.staged:
            raise ValueError("FSDP gathers weights with the rank's own backend: ranks sharing a "
                             "GPU over gloo (staged) cannot; give each rank its own GPU or "
                             "run on the CPU")
        if self.groups[0] is None:
            return
        group = self.groups[0].plan_group
        if self.model is None:  # a folder: read this rank's shards, never the whole model
            self.model, self.load_peak_bytes = load_sharded(plans[0].source, group,
                                                            self.ctx.device)
        else:
            shard_blocks(self.model, group, self.ctx.device.type)
    def takes_part(self, i: int) -> bool:
        return self.groups[i] is not None

    @torch.no_grad()
    def run(self, i: int, tracer: Tracer) -> dict:
        """One round: every request of plan ``i``; every rank returns the latents."""
        plan, groups = self.plans[i], self.groups[i]
        staged = self.ctx.placement.staged
        split = even_split(plan.preset.num_tokens(plan.shape), plan.degree)
        a2a, ring = self._install(i, split, tracer)
        forward = None if plan.degree == 1 else partial(  # degree 1: each rank a whole half
            sp_forward, self.model, group=groups.sp_group, split=split, staged=staged)
        vm = self.vmajors[i]
        if vm is not None:
            forward = _KeyedByText(forward, vm)
        den = plan_denoiser(self.model, plan, forward=forward)
        report = (lambda step: self.ctx.emit(("step", step))) if (
            plan.report_steps and self.ctx.rank == 0) else None
        gathers = trace_gathers(self.model, tracer) if plan.fsdp else []  # FSDP's all-gathers
        try:
            latents = self._requests(plan, groups, den, forward, report, vm)
        finally:
            for handle in gathers:
                handle.remove()
        return {"latents": latents, **self._counts(i, a2a, ring)}

    def _requests(self, plan: SPPlan, groups: SPGroups, den, forward, report,
                  vm: VMajor | None) -> dict:
        """Every request of the plan, start to end; the final latents by request id."""
        staged = self.ctx.placement.staged
        latents = {}
        for r in plan.requests:
            # no span per step: the processors draw their own (compute, all-to-all waits)
            state = den.initial_state(r, plan.shape)
            if vm is not None:
                vm.reset()  # nothing is held at a request's first step
                forward.cond_text = den.conditioning(r).text
            if plan.cfg_parallel:
                state = cfg_parallel_steps(den, state, r, groups, staged, report)
            else:
                [state] = den.run([state], [r], range(plan.sampling.num_steps), on_step=report)
            latents[r.request_id] = state.latent
        return latents

    def _counts(self, i: int, a2a: A2ACounter, ring: Ring) -> dict:
        """What plan ``i``'s traffic counters say after a round."""
        hier, vm = self.hierarchies[i], self.vmajors[i]
        return {"a2a_calls": a2a.calls, "a2a_bytes": a2a.bytes_sent,
                "a2a_per_call": a2a.per_call, "ring_hops": ring.hops,
                "ring_bytes": ring.bytes_sent,
                "hier": None if hier is None else (hier.intra_bytes, hier.inter_bytes,
                                                   hier.inter_messages),
                "vmajor": None if vm is None else (vm.rows_sent, vm.rows_total, vm.bytes_sent,
                                                   vm.bytes_full),
                "param_bytes": local_parameter_bytes(self.model),
                "load_peak_bytes": self.load_peak_bytes}

    def _install(self, i: int, split: tuple[int, ...], tracer: Tracer
                 ) -> tuple[A2ACounter, Ring]:
        """Route the model's self-attention for plan ``i``; the counters it fills."""
        plan, groups = self.plans[i], self.groups[i]
        staged, rules = self.ctx.placement.staged, self.ctx.rules
        if plan.degree == 1:  # CFG-parallel with FSDP and no sequence split: diffusers' own
            use_diffusers_attention(self.model)
            return A2ACounter(), Ring(None, split, 0)
        if plan.attention == "usp":
            return install_usp(self.model, groups, plan.dims, split, rules=rules,
                               staged=staged, tracer=tracer)
        if plan.attention == "ring":
            ring = install_ring(self.model, groups.sp_group, split, rules=rules,
                                staged=staged, tracer=tracer)
            return A2ACounter(), ring
        hier = self.hierarchies[i]
        if hier is not None:
            hier.reset()
        vm = self.vmajors[i]
        if vm is not None:
            vm.zero_counts()
        counter = install_ulysses(self.model, groups.sp_group, split, v_first=plan.v_first,
                                  tracer=tracer, staged=staged, hier=hier, vmajor=vm)
        return counter, Ring(None, split, 0)


class _KeyedByText:
    """A forward that tells V-Major which conditioning it runs (the prompt's or the negative
    one's: each has its own V, so its own copies)."""

    def __init__(self, forward, vm: VMajor):
        self.forward, self.vm = forward, vm
        self.cond_text: torch.Tensor | None = None

    def __call__(self, latent: torch.Tensor, timestep: torch.Tensor, text: torch.Tensor
                 ) -> torch.Tensor:
        same = self.cond_text is not None and torch.equal(text, self.cond_text)
        self.vm.branch = 0 if same else 1
        return self.forward(latent, timestep, text)


def _hierarchy(plan: SPPlan, rank: int) -> Hierarchy | None:
    """This rank's (node x local) groups for a plan with ``ranks_per_node``: made for every
    CFG branch on every rank (group creation is collective), mine kept."""
    if plan.ranks_per_node is None:
        return None
    d = plan.dims
    mine = None
    for c in range(d.cfg):
        members = [d.rank_of(c, r, u) for r in range(d.ring) for u in range(d.ulysses)]
        h = build_hierarchy(members, plan.ranks_per_node)
        mine = h if h is not None else mine
    return mine


def cfg_parallel_steps(den, state: StepState, request: Request, groups: SPGroups,
                       staged: bool, report=None) -> StepState:
    """Every step with this branch's half of the guided forward (``cfg.halves``): the
    velocities exchanged with the other branch, the same update on every rank."""
    cond = den.conditioning(request)
    for step in range(den.sampling.num_steps):
        state = cfg_parallel_step(den, state, cond, groups.cfg_index, groups.cfg_group, staged)
        if report is not None:
            report(step)
    return state


@dataclass
class SPResult:
    """Every rank's latents (equal: each rank holds the whole result), the all-to-alls rank 0
    counted, one merged timeline per round."""

    plan: SPPlan
    rank_latents: list[dict[int, torch.Tensor]]  # by rank, last round
    a2a_calls: int
    a2a_bytes: int  # sent by rank 0 in the last round
    traces: list[Trace]
    ring_bytes: int = 0  # K/V blocks rank 0 sent around the ring in the last round
    # with ranks_per_node: rank 0's (intra-node bytes, inter-node bytes, inter-node messages)
    hierarchy: tuple[int, int, int] | None = None
    # with v_major: rank 0's (V rows sent, rows a plain all-to-all sends, bytes sent, bytes)
    vmajor: tuple[int, int, int, int] | None = None
    param_bytes: list[int] = field(default_factory=list)  # the weights each rank holds
    # FSDP from a folder: the most tensor bytes each rank held while loading (load_sharded)
    load_peak_bytes: list[int] = field(default_factory=list)

    @property
    def latents(self) -> dict[int, torch.Tensor]:
        """Rank 0's final latents by request id."""
        return self.rank_latents[0]

    @classmethod
    def from_runs(cls, plan: SPPlan, runs: PlanRuns) -> SPResult:
        """Merge what the ranks of one plan returned."""
        last = runs.last()
        ranks = sorted(last)
        return cls(plan, [last[r]["latents"] for r in ranks], last[0]["a2a_calls"],
                   last[0]["a2a_bytes"], runs.traces, last[0]["ring_bytes"], last[0]["hier"],
                   last[0]["vmajor"], [last[r]["param_bytes"] for r in ranks],
                   [last[r]["load_peak_bytes"] for r in ranks])


def run_sp(plan: SPPlan, rounds: int = 1, **launch_kwargs) -> SPResult | None:
    """Launch ``plan.degree`` ranks and run the plan (``None`` on torchrun ranks but 0)."""
    out = run_sps({"plan": plan}, rounds, **launch_kwargs)
    return None if out is None else out["plan"]


def run_sps(plans: dict[str, SPPlan], rounds: int = 1,
            **launch_kwargs) -> dict[str, SPResult] | None:
    """Several SP plans (one model source) in one launch, interleaved round by round."""
    world = max(p.world_size for p in plans.values())
    runs = run_side_by_side(plans, runner=SPRunner, world_size=world, rounds=rounds,
                            **launch_kwargs)
    if runs is None:
        return None
    return {name: SPResult.from_runs(plans[name], r) for name, r in runs.items()}


__all__ = ["SPPlan", "SPResult", "SPRunner", "run_sp", "run_sps"]
