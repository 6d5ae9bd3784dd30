"""Each layout's per-rank memory measured on live CPU ranks: what ``memory_model`` predicts.

Every layout the memory model covers runs here on real ranks with the memory tracking of
``ppdit.runtime.observe.memory`` (live tensor bytes on the CPU, the allocator's peak on a GPU), and
reports per rank the weights it holds and the peak of its run above them (activations, handoff
frames, solver state, prompts). The layouts that share a runner share a launch, and every
launch can reuse one pool of ranks (``pool=``), so the whole set costs a few seconds per plan.

The workload matches ``memory_model``'s defaults: one request, guidance on every step (two
halves: one batch of 2 where the layout batches them, one half per rank under CFG-parallel,
one micro-batch each under layer split), Euler, the preset's latent, fp32 (the CPU's dtype).
"""

from __future__ import annotations

from dataclasses import dataclass

from ppdit.analysis.hardware import Layout
from ppdit.analysis.rank_memory import (
    RankMemory,
    layer_split_memory,
    module_bytes,
    step_split_memory,
)
from ppdit.checkpoint.source import ModelSource
from ppdit.parallel.cfg.run import CFGPlan, CFGRunner
from ppdit.parallel.fsdp.shard import local_parameter_bytes
from ppdit.parallel.layer_split.schedule import LayerSplitPlan
from ppdit.parallel.sequence.run import SPPlan, SPRunner
from ppdit.parallel.step_split.plan import make_plan
from ppdit.runtime.observe.trace import peak_memory
from ppdit.runtime.rounds import PlanRuns, run_side_by_side
from ppdit.sampler import Request, SamplingConfig

GUIDANCE = 5.0  # any scale != 1: every step guided, so every layout runs both halves

# name -> the layout it measures (the names are what the table and the tests print)
MEASURED_LAYOUTS: dict[str, Layout] = {
    "1 GPU": Layout(), "step-split P=2": Layout(pp=2, split="step"),
    "layer-split P=2": Layout(pp=2), "TP=2": Layout(tp=2), "Ulysses=2": Layout(ulysses=2),
    "ring=2": Layout(ring=2), "CFG=2": Layout(cfg=2), "Ulysses=2 x FSDP": Layout(ulysses=2,
                                                                             fsdp=True),
}


@dataclass(frozen=True)
class LayoutMemory:
    """One layout's measurement: every rank's weights and run peak."""

    name: str
    layout: Layout
    ranks: dict[int, RankMemory]

    @property
    def busiest(self) -> RankMemory:
        """The rank with the highest total: the one that decides whether the layout fits."""
        return max(self.ranks.values(), key=lambda m: m.total_bytes)


class SPMemoryRunner(SPRunner):
    """``SPRunner`` whose result is the bytes of the weights this rank holds (its FSDP shards
    and the root, or the whole model)."""

    def result(self, i: int) -> int:
        buffers = sum(b.numel() * b.element_size() for b in self.model.buffers())
        return local_parameter_bytes(self.model) + buffers


class CFGMemoryRunner(CFGRunner):
    """``CFGRunner`` whose result is the bytes of the (whole) model this rank holds."""

    def result(self, i: int) -> int:
        return module_bytes(self.model)


def _traced(runs: PlanRuns) -> dict[int, RankMemory]:
    """Per rank: the weights (``result``) and the highest round peak the traces recorded."""
    peaks: dict[int, int] = {}
    for trace in runs.traces:
        for rank, peak in peak_memory(trace).items():
            peaks[rank] = max(peaks.get(rank, 0), peak)
    return {r: RankMemory(r, runs.results[r], peaks[r]) for r in sorted(runs.results)}


def _sampling(num_steps: int) -> SamplingConfig:
    return SamplingConfig(num_steps=num_steps, guidance_scale=GUIDANCE)


def measure_layouts(preset: str = "small", *, num_steps: int = 2, fsdp: bool = True,
                    **launch_kwargs) -> dict[str, LayoutMemory]:
    """Run every layout of ``MEASURED_LAYOUTS`` (over 2 ranks each) with memory tracking.

    Five launches (pass ``pool=`` a live pool of 2 ranks to pay start-up once): the step-split
    runner takes 1 GPU, step split and TP; then layer split, the two sequence-parallel plans,
    CFG-parallel, and FSDP x Ulysses (FSDP shards the rank's one model in place, so it has a
    job of its own; ``fsdp=False`` leaves it out).
    """
    kw = dict(sampling=_sampling(num_steps), source=ModelSource(preset=preset))
    step = step_split_memory({"1 GPU": make_plan(1, warmup=0, **kw),
                              "step-split P=2": make_plan(2, warmup=0, **kw),
                              "TP=2": make_plan(1, tp=2, warmup=0, **kw)}, **launch_kwargs)
    layer = layer_split_memory({"layer-split P=2": LayerSplitPlan(
        (Request(0, 0),), 2, 2, wrap=False, warmup=0, **kw)}, **launch_kwargs)
    per_rank = {**step, **layer}
    sp = {"Ulysses=2": SPPlan(attention="ulysses", **kw),
          "ring=2": SPPlan(attention="ring", **kw)}
    jobs = [(sp, SPMemoryRunner), ({"CFG=2": CFGPlan(**kw)}, CFGMemoryRunner)]
    if fsdp:
        jobs.append(({"Ulysses=2 x FSDP": SPPlan(fsdp=True, **kw)}, SPMemoryRunner))
    for plans, runner in jobs:
        runs = run_side_by_side(plans, runner=runner, world_size=2, memory=True,
                                **launch_kwargs)
        per_rank.update({name: _traced(r) for name, r in runs.items()})
    return {name: LayoutMemory(name, MEASURED_LAYOUTS[name], per_rank[name])
            for name in MEASURED_LAYOUTS if name in per_rank}


__all__ = ["GUIDANCE", "MEASURED_LAYOUTS", "CFGMemoryRunner", "LayoutMemory",
           "SPMemoryRunner", "measure_layouts"]
