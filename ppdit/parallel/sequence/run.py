"""Ulysses SP from the caller's side: a plan, what every rank does with it, and the launch.

Every rank holds the whole model and runs every step of every request with its token slice
(``ulysses.sp_forward``); the shared ``Denoiser`` applies the same update to the same gathered
velocity on every rank, so every rank ends with the whole latent. The plan runs seeded presets
(the lessons) or a pipeline folder with its scheduler and prompts (``ppdit generate --layout
sp``) alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import torch

from ppdit.checkpoint.solver import plan_denoiser
from ppdit.checkpoint.source import ModelPlan, ModelSource
from ppdit.parallel.sequence.comms import even_split
from ppdit.parallel.sequence.ring import install_ring
from ppdit.parallel.sequence.ulysses import check_sp_degree, install_ulysses, sp_forward
from ppdit.runtime.mesh import ParallelDims, build_groups
from ppdit.runtime.rank import RankContext
from ppdit.runtime.rounds import PlanRuns, ReplicatedRunner, run_side_by_side
from ppdit.runtime.trace import Trace, Tracer
from ppdit.sampler import CFG_MODES, Conditioning, Request, SamplingConfig

SP_ATTENTION = ("ulysses", "ring")


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
    # blocks around the ring, the token split kept (any head count: ring.py)
    attention: str = "ulysses"
    solver: str = "euler"  # or "folder": the source folder's scheduler
    cfg: str = "batched"  # or "split": WanPipeline's two forwards
    prompts: tuple[Conditioning, ...] | None = None  # one per request; None: seeded stand-ins
    report_steps: bool = False  # rank 0 emits ("step", i) events (a progress bar)

    def __post_init__(self) -> None:
        if self.attention not in SP_ATTENTION:
            raise ValueError(f"attention={self.attention!r} is not one of {SP_ATTENTION}")
        if self.attention == "ulysses":
            check_sp_degree(self.preset.num_heads, self.degree)
        self.check_workload()
        if self.cfg not in CFG_MODES:
            raise ValueError(f"cfg={self.cfg!r} is not one of {CFG_MODES}")
        tokens = self.preset.num_tokens(self.shape)
        if self.degree > tokens:
            raise ValueError(f"degree={self.degree} exceeds the {tokens} tokens: sequence "
                             "parallelism needs at least one token per rank")


    @property
    def world_size(self) -> int:
        """Ranks the plan runs on."""
        return self.degree


class SPRunner(ReplicatedRunner):
    """Every SP plan of a side-by-side job on one rank (each rank holds the whole model)."""

    def __init__(self, ctx: RankContext, plans: Sequence[SPPlan]):
        super().__init__(ctx, plans)
        # one group per plan, every rank creating every group in order (runtime.mesh)
        self.groups = [build_groups(ParallelDims(pp=1, tp=p.degree, world_size=p.degree),
                                    ctx.rank) for p in plans]

    def takes_part(self, i: int) -> bool:
        return self.groups[i] is not None

    @torch.no_grad()
    def run(self, i: int, tracer: Tracer) -> dict:
        """One round: every request of plan ``i``; every rank returns the latents."""
        plan, group = self.plans[i], self.groups[i].tp_group
        staged = self.ctx.placement.staged
        split = even_split(plan.preset.num_tokens(plan.shape), plan.degree)
        if plan.attention == "ring":
            counter = install_ring(self.model, group, split, rules=self.ctx.rules,
                                   staged=staged, tracer=tracer)
        else:
            counter = install_ulysses(self.model, group, split, v_first=plan.v_first,
                                      tracer=tracer, staged=staged)
        forward = partial(sp_forward, self.model, group=group, split=split, staged=staged)
        den = plan_denoiser(self.model, plan, forward=forward)
        report = (lambda step: self.ctx.emit(("step", step))) if (
            plan.report_steps and self.ctx.rank == 0) else None
        latents = {}
        for r in plan.requests:
            # no span per step: the processors draw their own (compute, all-to-all waits)
            [state] = den.run([den.initial_state(r, plan.shape)], [r],
                              range(plan.sampling.num_steps), on_step=report)
            latents[r.request_id] = state.latent
        if plan.attention == "ring":
            return {"latents": latents, "a2a_calls": 0, "a2a_bytes": 0, "a2a_per_call": [],
                    "ring_hops": counter.hops, "ring_bytes": counter.bytes_sent}
        return {"latents": latents, "a2a_calls": counter.calls, "a2a_bytes": counter.bytes_sent,
                "a2a_per_call": counter.per_call}


@dataclass
class SPResult:
    """Every rank's latents (equal: each rank holds the whole result), the all-to-alls rank 0
    counted, one merged timeline per round."""

    plan: SPPlan
    rank_latents: list[dict[int, torch.Tensor]]  # by rank, last round
    a2a_calls: int
    a2a_bytes: int  # sent by rank 0 in the last round
    traces: list[Trace]
    ring_bytes: int = 0  # K/V blocks rank 0 sent around the ring in the last round ("ring")

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
                   last[0]["a2a_bytes"], runs.traces, last[0].get("ring_bytes", 0))


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
