"""One runner for every layout: a ``LayoutPlan`` is a ``Layout`` and a workload, and running it
is the same three moves whatever the axes (torchtitan's ``parallelize`` then the loop)::

    LayoutPlan(layout, requests, sampling, source, ...)     validated once (layout.py's rule,
         |                                                   the model's, the options')
    the mesh   layout.mesh(): every group of every axis (runtime.comm.mesh)
    weights + forward axes   ForwardStack: whole or sharded, then TP, sequence, FSDP, CFG
    the loop, picked by the pipeline axis:
        none    every request through ``Denoiser.run`` (``LayoutRunner``, below)
        step    the step-split stage loop (``step_split``: a stage's ranks run the forward axes)
        layer   the layer-split schedule (``layer_split``: it stands alone)
        pipefusion  the same schedule over token patches (``pipefusion``: lossy, alone)

The single device is the same plan with every degree 1 (``run_local``), what ``ppdit generate``
compares every layout with. A new forward axis is a step in ``ForwardStack``; a new loop, a
row of ``LOOPS``: no runner per combination.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ppdit.checkpoint.source import ModelPlan, ModelSource
from ppdit.parallel.forward import ForwardOptions, ForwardStack, StackRunner
from ppdit.parallel.layer_split.run import run_layer_split
from ppdit.parallel.layer_split.schedule import plan_from as layer_split_plan
from ppdit.parallel.layout import Layout
from ppdit.parallel.pipefusion.plan import plan_from as pipefusion_plan
from ppdit.parallel.step_split.plan import plan_from as step_split_plan
from ppdit.parallel.step_split.run import run_step_split
from ppdit.runtime.comm.wire import DEFAULT_TIMEOUT_S, work_bound
from ppdit.runtime.observe.timing import timed
from ppdit.runtime.observe.trace import Rounds, Trace, Tracer
from ppdit.runtime.rounds import PlanRuns, run_side_by_side
from ppdit.sampler import Conditioning, Denoiser, Request, SamplingConfig, check_cfg


@dataclass(frozen=True)
class LayoutPlan(ForwardOptions, ModelPlan):
    """Requests generated on a layout; the same on every rank (picklable)."""

    layout: Layout = field(default_factory=Layout)
    requests: tuple[Request, ...] = (Request(0, 0),)
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(num_steps=4))
    source: ModelSource = field(default_factory=ModelSource)
    latent_shape: tuple[int, ...] | None = None  # None: the source's default
    solver: str = "euler"  # or "folder": the source folder's scheduler
    cfg: str = "batched"  # the two halves where cfg=1: one batch, or "split" (WanPipeline's)
    prompts: tuple[Conditioning, ...] | None = None  # one per request; None: seeded stand-ins
    report_steps: bool = False  # one rank emits ("step", i) events (a progress bar)
    patches: int = 4  # PipeFusion: token patches per step (``parallel.pipefusion``)
    warmup_steps: int = 1  # PipeFusion: the first steps run whole (exact)

    def __post_init__(self) -> None:
        self.check_workload()
        check_cfg(self.cfg)
        self.check_forward()

    @property
    def world_size(self) -> int:
        """Ranks the plan runs on."""
        return self.layout.ranks

    def mesh(self):
        """The plan's rank grid (``Layout.mesh``)."""
        return self.layout.mesh(ranks_per_node=self.ranks_per_node)


def _run_one(plan: LayoutPlan, rounds: int = 1, **launch_kwargs):
    out = run_layouts({"plan": plan}, rounds, **launch_kwargs)
    return None if out is None else out["plan"]


# The loop each pipeline axis picks: its folder's plan from a LayoutPlan, and how to run it.
# A new pipeline axis is one row here (and its folder).
LOOPS = {None: (lambda plan: plan, _run_one),
         "step": (step_split_plan, run_step_split),
         "layer": (layer_split_plan, run_layer_split),
         "pipefusion": (pipefusion_plan, run_layer_split)}


def loop_plan(plan: LayoutPlan):
    """The plan of the loop the pipeline axis picks: a ``StepSplitPlan`` whose stages run the
    forward axes, a ``LayerSplitPlan``, or ``plan`` itself (no pipeline)."""
    return LOOPS[plan.layout.pipeline][0](plan)


def run_plan(plan: LayoutPlan, rounds: int = 1, **launch_kwargs):
    """Launch ``plan.world_size`` ranks and run the plan in its loop; the loop's result (its
    ``latents`` by request id, its ``traces``), ``None`` on torchrun ranks other than 0."""
    make, run = LOOPS[plan.layout.pipeline]
    return run(make(plan), rounds, **launch_kwargs)


def run_requests(plan: LayoutPlan, stack: ForwardStack, den: Denoiser,
                 tracer: Tracer | None = None,
                 on_step: Callable[[int], None] | None = None) -> dict[int, torch.Tensor]:
    """Every request of the plan, start to end, through the one loop (``Denoiser.run``); the
    final latents by request id. A compute span per step, unless the forward draws its own."""
    out = {}
    for r in plan.requests:
        span = None if tracer is None or stack.draws_compute else (
            lambda i, rid=r.request_id: tracer.span("compute", f"r{rid} step {i}",
                                                    request=rid, step=i))
        stack.start_request(den, r)
        [state] = den.run([den.initial_state(r, plan.shape)], [r],
                          range(plan.sampling.num_steps), span=span, on_step=on_step)
        out[r.request_id] = state.latent
    return out


def run_local(plan: LayoutPlan, device: str | torch.device = "cpu", *,
              on_step: Callable[[int], None] | None = None,
              tracer: Tracer | None = None) -> dict[int, torch.Tensor]:
    """The plan on one device, in this process (every degree 1): the single-device reference
    every layout must equal, reached through the same source, stack and loop."""
    if plan.layout.ranks != 1:
        raise ValueError(f"run_local runs the single device; layout {plan.layout} needs "
                         f"{plan.layout.ranks} ranks (run_plan)")
    stack = ForwardStack(None, plan, None, plan.source.dit(device))
    return run_requests(plan, stack, stack.denoiser(), tracer, on_step)


class LayoutRunner(StackRunner):
    """Every plan without a pipeline axis of a side-by-side job, on one rank, request by request."""

    @torch.no_grad()
    def run(self, i: int, tracer: Tracer) -> dict:
        """One round: every request of plan ``i``; every rank returns the latents."""
        plan, cache = self.plans[i], self.dens[i].cache
        if cache is not None:
            cache.log.clear()  # this round's decisions
        with self.stacks[i].round(tracer) as stack, timed(self.ctx.placement) as clock:
            latents = run_requests(plan, stack, self.dens[i], tracer,
                                   lambda step: self._step_done(plan, step, clock))
        return {"latents": latents, **stack.counts(), "seconds": clock.seconds,
                "cache_log": [] if cache is None else list(cache.log)}

    def _step_done(self, plan: LayoutPlan, step: int, clock) -> None:
        """A progress event (rank 0, if asked); after the first step, the job's bounds from
        its time (``RankContext.expect``: the first step, cold, bounds every later one)."""
        if plan.report_steps and self.ctx.rank == 0:
            self.ctx.emit(("step", step))
        if step == 0 and self.ctx.follows_work:
            steps = plan.sampling.num_steps * len(plan.requests)
            self.ctx.expect(work_bound(DEFAULT_TIMEOUT_S, steps, clock.lap()))


@dataclass
class LayoutResult(Rounds):
    """Every rank's latents (equal: each rank of a forward holds the whole result), what rank
    0's traffic counters said, one merged timeline per round."""

    plan: LayoutPlan
    rank_latents: list[dict[int, torch.Tensor]]  # by rank, last round
    a2a_calls: int
    a2a_bytes: int  # sent by rank 0 in the last round
    traces: list[Trace]
    ring_bytes: int = 0  # K/V blocks rank 0 sent around the ring in the last round
    # with ranks_per_node: rank 0's (intra-node bytes, inter-node bytes, inter-node messages)
    hierarchy: tuple[int, int, int] | None = None
    # with v_major: rank 0's (V rows sent, rows a plain all-to-all sends, bytes sent, bytes)
    vmajor: tuple[int, int, int, int] | None = None
    held_bytes: list[int] = field(default_factory=list)  # the weights each rank holds
    # FSDP from a folder: the most tensor bytes each rank held while loading (load_sharded)
    load_peak_bytes: list[int] = field(default_factory=list)
    # a step cache's (request, step, branch, computed) decisions, by rank (``ppdit.cache``)
    cache_logs: list[list[tuple]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)  # rank 0's time of each round (timed)

    @property
    def latents(self) -> dict[int, torch.Tensor]:
        """Rank 0's final latents by request id."""
        return self.rank_latents[0]

    @classmethod
    def from_runs(cls, plan: LayoutPlan, runs: PlanRuns) -> LayoutResult:
        """Merge what the ranks of one plan returned."""
        last = runs.last()
        ranks = sorted(last)
        first = last[ranks[0]]
        return cls(plan, [last[r]["latents"] for r in ranks], first["a2a_calls"],
                   first["a2a_bytes"], runs.traces, first["ring_bytes"], first["hier"],
                   first["vmajor"], [runs.held[r] for r in ranks],
                   [last[r]["load_peak_bytes"] for r in ranks],
                   [last[r]["cache_log"] for r in ranks],
                   [out["seconds"] for out in runs.outputs[ranks[0]]])


def run_layouts(plans: dict[str, LayoutPlan], rounds: int = 1,
                **launch_kwargs) -> dict[str, LayoutResult] | None:
    """Several plans without a pipeline axis (one model source) in one launch, interleaved
    round by round; ``None`` on torchrun ranks other than 0."""
    if any(p.layout.pipeline for p in plans.values()):
        raise ValueError("run_layouts runs layouts without a pipeline axis; run_plan picks "
                         "the step or layer loop")
    world = max(p.world_size for p in plans.values())
    runs = run_side_by_side(plans, runner=LayoutRunner, world_size=world, rounds=rounds,
                            **launch_kwargs)
    if runs is None:
        return None
    return {name: LayoutResult.from_runs(plans[name], r) for name, r in runs.items()}
