"""Per-rank memory of a real pipeline run: what each rank holds, and its peak above that.

The earlier report ran *step split* for memory: "each GPU only holds activations for its
assigned steps ... peak memory per GPU is reduced by ~N". In inference no activation outlives
its step (there is no backward pass), so a rank that runs 4 steps peaks exactly as high as one
that runs 28, and every step-split rank holds the whole model. A *layer split* is what divides
the weights. This module measures both on the ranks themselves, while they run their plans:

* ``weight_bytes``: the parameters and buffers the rank's model holds during the run;
* ``peak_bytes``: the most tensor bytes allocated at once *inside* the run, above those weights
  (activations, received frames, ring buffers), from ``runtime.observe.memory``: the allocator's
  peak on a GPU, a live-tensor count on the CPU.

Why not the process's peak RSS: it cannot be reset between plans, it counts the interpreter and
torch's libraries (hundreds of MB next to a few MB of model), malloc keeps freed pages, and a
layer-split rank here builds the *whole* seeded model before dropping the blocks it does not own
(so its weights equal one device's bit for bit) — its RSS high-water mark is one full model,
an artefact of how the weights are made, not of the layout. Tensor bytes are what
``torch.cuda.max_memory_allocated`` reports on a GPU, and what decides an out-of-memory error.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ppdit.parallel.layer_split.ranks import LayerStageRunner
from ppdit.parallel.layer_split.schedule import LayerSplitPlan
from ppdit.parallel.step_split.plan import StepSplitPlan
from ppdit.parallel.step_split.ranks import StepStageRunner
from ppdit.runtime.observe.memory import track_peak_memory
from ppdit.runtime.observe.trace import Tracer
from ppdit.runtime.rounds import PlanRuns, run_side_by_side


@dataclass(frozen=True)
class RankMemory:
    """One rank's memory in one plan, in bytes."""

    rank: int
    weight_bytes: int  # parameters + buffers of the model this rank holds
    peak_bytes: int  # most bytes allocated at once during the run, above the weights

    @property
    def total_bytes(self) -> int:
        """Weights plus the run's peak: the rank's high-water mark of tensor memory."""
        return self.weight_bytes + self.peak_bytes


def module_bytes(model: torch.nn.Module) -> int:
    """Bytes of a module's parameters and buffers (each storage counted once)."""
    seen: dict[int, int] = {}
    for t in [*model.parameters(), *model.buffers()]:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


class StepSplitMemoryRunner(StepStageRunner):
    """``StepStageRunner`` whose rounds return their peak bytes and whose result is the weights."""

    def run(self, i: int, tracer: Tracer) -> int:
        with track_peak_memory(self.ctx.placement) as mem:
            super().run(i, tracer)
        return mem.peak_bytes

    def result(self, i: int) -> int:
        return module_bytes(self.dens[i].model)


class LayerSplitMemoryRunner(LayerStageRunner):
    """``LayerStageRunner`` whose rounds return their peak bytes and whose result is the
    weights of the stage model (only this rank's blocks)."""

    def run(self, i: int, tracer: Tracer) -> int:
        with track_peak_memory(self.ctx.placement) as mem:
            super().run(i, tracer)
        return mem.peak_bytes

    def result(self, i: int) -> int:
        return module_bytes(self.models[i])


def _per_rank(runs: PlanRuns) -> dict[int, RankMemory]:
    return {rank: RankMemory(rank, runs.results[rank], max(peaks))
            for rank, peaks in sorted(runs.outputs.items())}


def step_split_memory(plans: dict[str, StepSplitPlan], rounds: int = 1,
                      **launch_kwargs) -> dict[str, dict[int, RankMemory]]:
    """Run step-split plans side by side and return each rank's memory per plan (the peak is
    the largest over ``rounds``)."""
    world = max(p.world_size for p in plans.values())
    runs = run_side_by_side(plans, runner=StepSplitMemoryRunner, world_size=world,
                            rounds=rounds, **launch_kwargs)
    return {name: _per_rank(r) for name, r in runs.items()}


def layer_split_memory(plans: dict[str, LayerSplitPlan], rounds: int = 1,
                       **launch_kwargs) -> dict[str, dict[int, RankMemory]]:
    """Run layer-split plans side by side (ppdit's executor) and return each rank's memory."""
    world = max(p.num_stages for p in plans.values())
    jobs = {name: (plan, "ppdit") for name, plan in plans.items()}
    runs = run_side_by_side(jobs, runner=LayerSplitMemoryRunner, world_size=world,
                            rounds=rounds, **launch_kwargs)
    return {name: _per_rank(r) for name, r in runs.items()}


__all__ = ["LayerSplitMemoryRunner", "RankMemory", "StepSplitMemoryRunner",
           "layer_split_memory", "module_bytes", "step_split_memory"]
