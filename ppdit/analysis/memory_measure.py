"""Each layout's per-rank memory, measured on live ranks while they run: what ``memory_model``
predicts, and what the earlier report's claim about step split gets wrong.

Per rank and plan, ``RankMemory`` holds the model the rank keeps (``weight_bytes``: its shards
under TP and FSDP, its blocks under layer split, else the whole model) and the most tensor bytes
allocated at once *inside* a round above it: the allocator's peak on a GPU, a live-tensor count
on the CPU (``runtime.observe.memory``).

The report ran *step split* for memory ("peak memory per GPU is reduced by ~N"). In inference no
activation outlives its step, so a rank running 4 steps peaks as high as one running 28, and
every step-split rank holds the whole model; a *layer split* divides the weights. Not the
process's peak RSS: it cannot be reset between plans, counts the interpreter and libraries,
keeps freed pages, and sees a layer-split rank build the whole seeded model before dropping
blocks. Tensor bytes are what ``max_memory_allocated`` reports, and what decides an OOM.

``measure_memory`` runs any plan with its own runner; ``measure_layouts`` the layouts the memory
model covers, with its defaults (one request, guidance on every step, Euler, fp32)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ppdit.checkpoint.source import ModelSource
from ppdit.parallel.layer_split.ranks import LayerStageRunner
from ppdit.parallel.layer_split.schedule import LayerSplitPlan
from ppdit.parallel.layout import Layout
from ppdit.parallel.runner import LayoutPlan, LayoutRunner
from ppdit.parallel.step_split.plan import StepSplitPlan, make_plan
from ppdit.parallel.step_split.ranks import StepStageRunner
from ppdit.runtime.observe.trace import peak_memory
from ppdit.runtime.rounds import PlanRuns, run_side_by_side
from ppdit.sampler import Request, SamplingConfig

GUIDANCE = 5.0  # any scale != 1: every step guided, so every layout runs both halves
RUNNERS = {LayoutPlan: LayoutRunner, StepSplitPlan: StepStageRunner,
           LayerSplitPlan: LayerStageRunner}


@dataclass(frozen=True)
class RankMemory:
    """One rank's memory in one plan, in bytes."""
    rank: int
    weight_bytes: int  # parameters + buffers of the model this rank holds
    peak_bytes: int  # most bytes allocated at once during a round, above the weights

    @property
    def total_bytes(self) -> int:
        """Weights plus the run's peak: the rank's high-water mark of tensor memory."""
        return self.weight_bytes + self.peak_bytes


def per_rank(runs: PlanRuns) -> dict[int, RankMemory]:
    """Per rank: the weights it held and the highest round peak the traces recorded."""
    peaks: dict[int, int] = {}
    for trace in runs.traces:
        for rank, peak in peak_memory(trace).items():
            peaks[rank] = max(peaks.get(rank, 0), peak)
    return {r: RankMemory(r, runs.held[r], peaks[r]) for r in sorted(runs.held)}


def measure_memory(plans: Mapping[str, object], rounds: int = 1,
                   **launch_kwargs) -> dict[str, dict[int, RankMemory]]:
    """Run plans with memory tracking, each kind with its own runner (one launch per kind; pass
    ``pool=`` to pay start-up once); each rank's memory per plan."""
    out = {}
    for kind, runner in RUNNERS.items():
        mine = {n: p for n, p in plans.items() if type(p) is kind}
        if not mine:
            continue
        jobs = {n: (p, "ppdit") for n, p in mine.items()} if kind is LayerSplitPlan else mine
        world = max(p.world_size for p in mine.values())
        runs = run_side_by_side(jobs, runner=runner, world_size=world, rounds=rounds,
                                memory=True, **launch_kwargs)
        out.update({n: per_rank(r) for n, r in runs.items()})
    return {n: out[n] for n in plans}


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


# what the memory model covers, over 2 ranks each (the names are what the table prints)
MEASURED_LAYOUTS = (Layout(), Layout(step=2), Layout(layer=2), Layout(tp=2),
                    Layout(ulysses=2), Layout(ring=2), Layout(cfg=2), Layout(ulysses=2, fsdp=True))


def measure_layouts(preset: str = "small", *, num_steps: int = 2, fsdp: bool = True,
                    **launch_kwargs) -> dict[str, LayoutMemory]:
    """Run every layout of ``MEASURED_LAYOUTS`` with memory tracking, by its ``name``.
    Four launches: the step split, the layer split, the layouts without a pipeline, and FSDP x
    Ulysses (FSDP shards the rank's one model in place, so it has a job of its own;
    ``fsdp=False`` leaves it out)."""
    kw = dict(sampling=SamplingConfig(num_steps=num_steps, guidance_scale=GUIDANCE),
              source=ModelSource(preset=preset))
    plans = {}
    for m in MEASURED_LAYOUTS:
        if m.step > 1:
            plans[m.name] = make_plan(m.step, warmup=0, **kw)
        elif m.layer > 1:
            plans[m.name] = LayerSplitPlan((Request(0, 0),), m.layer, 2, wrap=False, warmup=0,
                                           **kw)
        elif not m.fsdp or fsdp:
            plans[m.name] = LayoutPlan(m, **kw)
    sharded = {n: p for n, p in plans.items()
               if isinstance(p, LayoutPlan) and p.layout.fsdp}
    got = measure_memory({n: p for n, p in plans.items() if n not in sharded}, **launch_kwargs)
    if sharded:
        got |= measure_memory(sharded, **launch_kwargs)
    return {m.name: LayoutMemory(m.name, m, got[m.name]) for m in MEASURED_LAYOUTS
            if m.name in got}
