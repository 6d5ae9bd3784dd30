"""CFG-parallel from the caller's side: a plan, what each of the two ranks does, the launch.

Rank 0 runs every guided step's conditional forward, rank 1 the unconditional one
(``halves.cfg_parallel_velocity``); both then hold the same velocity and apply the same
solver update, so both end with the latent. It runs seeded presets or a pipeline folder
with its scheduler and prompts (``ppdit generate --layout cfg``) alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ppdit.checkpoint.solver import plan_denoiser
from ppdit.checkpoint.source import ModelPlan, ModelSource
from ppdit.parallel.cfg.halves import cfg_parallel_step
from ppdit.runtime.comm.mesh import ParallelDims, build_groups
from ppdit.runtime.observe.trace import Trace, Tracer
from ppdit.runtime.processes.rank import RankContext
from ppdit.runtime.rounds import ReplicatedRunner, run_side_by_side
from ppdit.sampler import Conditioning, Request, SamplingConfig


@dataclass(frozen=True)
class CFGPlan(ModelPlan):
    """Guided requests with the two halves of every step on two ranks."""

    requests: tuple[Request, ...] = (Request(0, 0),)
    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(num_steps=4, guidance_scale=5.0))
    source: ModelSource = field(default_factory=ModelSource)
    latent_shape: tuple[int, ...] | None = None  # None: the source's default
    solver: str = "euler"  # or "folder": the source folder's scheduler
    prompts: tuple[Conditioning, ...] | None = None  # one per request; None: seeded stand-ins
    report_steps: bool = False  # rank 0 emits ("step", i) events (a progress bar)

    def __post_init__(self) -> None:
        self.check_workload()
        if not self.sampling.uses_cfg or self.sampling.guidance_steps is not None:
            raise ValueError(f"CFG-parallel needs guidance on every step (guidance_scale != 1, "
                             f"guidance_steps None), got {self.sampling}: without it there is "
                             "no second half")


    @property
    def cfg(self) -> str:
        """Each half is a batch-1 forward of its own: ``WanPipeline``'s arithmetic."""
        return "split"

    world_size = 2  # one rank per half


class CFGRunner(ReplicatedRunner):
    """Every CFG-parallel plan of a side-by-side job on one of the two ranks (each holds the
    whole model)."""

    def __init__(self, ctx: RankContext, plans: Sequence[CFGPlan]):
        super().__init__(ctx, plans)
        self.group = build_groups(ParallelDims(pp=1, tp=2, world_size=2), ctx.rank).tp_group

    @torch.no_grad()
    def run(self, i: int, tracer: Tracer) -> dict[int, torch.Tensor]:
        """One round: every request of plan ``i``; both ranks return the latents."""
        plan, half = self.plans[i], self.ctx.rank
        den = plan_denoiser(self.model, plan)
        out = {}
        for r in plan.requests:
            state = den.initial_state(r, plan.shape)
            cond = den.conditioning(r)
            for step in range(plan.sampling.num_steps):
                with tracer.span("compute", f"r{r.request_id} step {step}",
                                 request=r.request_id, step=step):
                    state = cfg_parallel_step(den, state, cond, half, self.group,
                                              self.ctx.placement.staged)
                if plan.report_steps and half == 0:
                    self.ctx.emit(("step", step))
            out[r.request_id] = state.latent
        return out


@dataclass
class CFGResult:
    """Both ranks' latents (equal) and one merged timeline per round."""

    plan: CFGPlan
    rank_latents: list[dict[int, torch.Tensor]]
    traces: list[Trace]

    @property
    def latents(self) -> dict[int, torch.Tensor]:
        """Rank 0's final latents by request id."""
        return self.rank_latents[0]


def run_cfg(plan: CFGPlan, rounds: int = 1, **launch_kwargs) -> CFGResult | None:
    """Launch the two ranks and run the plan (``None`` on torchrun ranks other than 0)."""
    runs = run_side_by_side({"plan": plan}, runner=CFGRunner, world_size=2, rounds=rounds,
                            **launch_kwargs)
    if runs is None:
        return None
    last = runs["plan"].last()
    return CFGResult(plan, [last[r] for r in sorted(last)], runs["plan"].traces)


__all__ = ["CFGPlan", "CFGResult", "CFGRunner", "run_cfg"]
