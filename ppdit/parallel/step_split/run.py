"""Step split from the caller's side: launch plans, collect latents and timelines, and the
single-device references every run must equal."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch

from ppdit.checkpoint.solver import plan_denoiser
from ppdit.parallel.step_split.plan import StepSplitPlan
from ppdit.parallel.step_split.ranks import StageInfo, StepStageRunner, stream_batch_ticks
from ppdit.runtime.observe.trace import Rounds, Trace
from ppdit.runtime.rounds import PlanRuns, run_side_by_side


@dataclass
class StepSplitResult(Rounds):
    """The merged outcome of a plan: final latents, one timeline per round, each rank's place."""

    plan: StepSplitPlan
    latents: dict[int, torch.Tensor]  # final latents by request id (rank 0 of each last stage)
    traces: list[Trace]
    boot_ns: dict[int, dict[str, int]] = field(default_factory=dict)  # per rank: BOOT_PHASES
    stages: dict[int, StageInfo] = field(default_factory=dict)  # per rank
    rank_latents: dict[int, dict[int, torch.Tensor]] = field(default_factory=dict)  # last round

    @classmethod
    def from_runs(cls, plan: StepSplitPlan, runs: PlanRuns) -> StepSplitResult:
        """Merge what the ranks of one plan returned."""
        last = runs.last()
        latents = {rid: x for rank, got in last.items() if runs.results[rank].forward_rank == 0
                   for rid, x in got.items()}
        return cls(plan, dict(sorted(latents.items())), runs.traces, runs.boot_ns,
                   runs.results, last)

    def throughput(self) -> float:
        """Requests per second, from the median round."""
        return len(self.plan.requests) / statistics.median(self.makespans_s)


def run_step_split(plan: StepSplitPlan, rounds: int = 1, **launch_kwargs) -> StepSplitResult:
    """Launch ``plan.world_size`` ranks and run the plan (``None`` on other torchrun ranks)."""
    out = run_step_splits({"plan": plan}, rounds, **launch_kwargs)
    return None if out is None else out["plan"]


def run_step_splits(plans: dict[str, StepSplitPlan], rounds: int = 3,
                    **launch_kwargs) -> dict[str, StepSplitResult] | None:
    """Several plans (one ``source``) in one launch, interleaved round by round so that their
    timings compare on a shared machine; as many ranks as the largest plan needs, a smaller
    plan leaving the others idle in its turn (``None`` on torchrun ranks other than 0)."""
    world = max(p.world_size for p in plans.values())
    runs = run_side_by_side(plans, runner=StepStageRunner, world_size=world, rounds=rounds,
                            **launch_kwargs)
    if runs is None:
        return None
    return {name: StepSplitResult.from_runs(plans[name], r) for name, r in runs.items()}


def stream_batch_reference(model: torch.nn.Module, plan: StepSplitPlan) -> dict[int, torch.Tensor]:
    """The stream-batch schedule on one device: the same batches, stage after stage.

    A stage's batches depend only on its own tick schedule, so running the stages in sequence
    reproduces exactly the arithmetic of the distributed run: this equals it bitwise."""
    den = plan_denoiser(model, plan)
    out: dict[int, torch.Tensor] = {}
    for replica in range(plan.replicas):
        requests = list(plan.requests[replica::plan.replicas])
        states = {r.request_id: den.initial_state(r, plan.shape) for r in requests}
        for steps in plan.stages:
            arriving, states = states, {}
            stream_batch_ticks(den, requests, steps, lambda r, src=arriving: src[r.request_id],
                               lambda st, dst=states: dst.__setitem__(st.request_id, st))
        out.update({rid: st.latent for rid, st in states.items()})
    return dict(sorted(out.items()))
