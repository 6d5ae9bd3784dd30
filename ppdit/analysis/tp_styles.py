"""TP variants side by side on real ranks: equality with one device, parameters, collectives,
graph breaks, compile time and forward time, from one launch.

A *variant* is a collective style (``"single"`` = the unsharded model on each rank, the
reference; ``"funcol"``, ``"c10d"``, ``"c10d_async"``; ``"dtensor"``) and eager or compiled.
Each rank builds every variant from the same seed, so all of them start from identical weights.
Timed rounds are interleaved by ``ppdit.runtime.rounds`` (round k starts at variant k mod n)
so a slow minute on a shared machine slows every variant, not one; forward times are medians.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.distributed as dist

from ppdit.checkpoint.source import ModelPlan, ModelSource
from ppdit.model import forward_by_stages, prologue, torch_dtype
from ppdit.parallel.share import check_plans
from ppdit.parallel.tensor.comms import CollectiveCounter, TraceReport, trace_report
from ppdit.parallel.tensor.dtensor import parallelize_wan_dtensor
from ppdit.parallel.tensor.parallelize import compile_blocks, local_param_count, parallelize_wan
from ppdit.runtime.comm.mesh import world_group
from ppdit.runtime.comm.wire import Wire
from ppdit.runtime.compile_cache import use_project_compile_cache
from ppdit.runtime.device import Placement
from ppdit.runtime.observe.timing import timed
from ppdit.runtime.processes.rank import RankContext
from ppdit.runtime.rounds import Job, Runner, median_ratio, rounds_worker, run_side_by_side
from ppdit.sampler import Request, initial_noise, prompt_embeddings

STYLES = ("single", "funcol", "c10d", "c10d_async", "dtensor")


@dataclass(frozen=True)
class TPVariant:
    """One way of running the model: a collective style, eager or compiled."""

    style: str
    compiled: bool = False

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"style={self.style!r} is not one of {STYLES}")
        if self.style == "c10d_async" and self.compiled:
            raise ValueError("style='c10d_async' cannot be compiled with fullgraph=True: every "
                             "async all-reduce is a graph break (trace it instead)")

    @property
    def name(self) -> str:
        """``"funcol"``, ``"funcol compiled"``, ..."""
        return self.style + (" compiled" if self.compiled else "")


@dataclass(frozen=True)
class TPCompare(ModelPlan):
    """What to run: variants, model, input, and how much to measure."""

    variants: tuple[TPVariant, ...]
    # weights and activations in source.dtype (bf16: compare with TP_TOL_BY_DTYPE["bf16"])
    source: ModelSource = field(default_factory=ModelSource)
    latent_shape: tuple[int, ...] | None = None  # None: the preset's default (1 sample)
    rounds: int = 3  # interleaved timing rounds (0: no timing)
    repeats: int = 3  # timed forwards per variant and round; the round keeps the median
    warmup: int = 1  # untimed forwards after building (and compiling) a variant
    trace: bool = False  # graph breaks of one block (and of the forward), per eager TP style
    trace_forward: bool = True  # also trace the whole forward (costs about as much again)
    # count the all-reduces inside the graphs of a block that breaks too (c10d_async: an AOT
    # trace per graph, the slowest trace of all); False counts them only for whole graphs
    trace_broken_collectives: bool = True

    def __post_init__(self) -> None:
        if len({v.name for v in self.variants}) != len(self.variants):
            raise ValueError("variants must be distinct")


@dataclass
class VariantResult:
    """One variant on one rank."""

    name: str
    output: torch.Tensor  # the forward's velocity (B, C, F, H, W), for equality checks
    max_abs_diff: float  # against the single-device eager forward on this rank
    local_params: int  # parameters held by this rank
    collectives: int  # collectives issued by one eager forward (CollectiveCounter)
    collective_bytes: int  # their payload bytes
    compile_s: float | None = None  # first compiled call (Dynamo + Inductor, or cache hits)
    graphs_compiled: int = 0  # graphs Dynamo made during that call (0: nothing was compiled)
    forward_s: list[float] = field(default_factory=list)  # median per timing round
    block_trace: TraceReport | None = None  # one block traced by Dynamo (trace=True)
    forward_trace: TraceReport | None = None  # the whole forward traced (trace=True)
    trace_s: float | None = None  # what tracing cost (explain + AOT graphs; no Inductor)

    @property
    def median_s(self) -> float:
        """Median forward time over rounds."""
        return statistics.median(self.forward_s) if self.forward_s else float("nan")


def example_inputs(preset: str, shape: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """Latent (noise), timestep 500 and prompt embedding of request 0, on the CPU."""
    latent = initial_noise(Request(0, 0), shape)
    return latent, torch.tensor([500.0] * shape[0]), prompt_embeddings(Request(0, 0), preset,
                                                                       batch=shape[0])


def build_variant(variant: TPVariant, spec: TPCompare, group: dist.ProcessGroup, wire: Wire):
    """The model for ``variant`` on this rank (on the wire's device), not yet compiled."""
    model = spec.source.dit(wire.device)
    if variant.style == "single":
        return model
    if variant.style == "dtensor":
        return parallelize_wan_dtensor(model, tp_group=group, device_type=wire.device.type,
                                       wire=wire)
    return parallelize_wan(model, tp_group=group, collectives=variant.style, wire=wire)


class TPCompareRunner(Runner):
    """Every variant of a ``TPCompare`` on one rank, with the whole world as the TP group.

    The job's plans are (spec, variant) pairs. Order, and why: build every variant eagerly and
    check it against the single-device forward, counting collectives -> trace graph breaks
    (``torch._dynamo.explain`` resets Dynamo, which would throw away compiled code, so it runs
    before any compile) -> per variant, compile and warm up -> timed rounds."""

    check = staticmethod(check_plans)

    def __init__(self, ctx: RankContext, plans: tuple[tuple[TPCompare, TPVariant], ...]):
        super().__init__(ctx, plans)
        use_project_compile_cache()
        spec, dev = plans[0][0], ctx.device
        dtype = torch_dtype(spec.dtype)
        latent, t, text = example_inputs(spec.preset, spec.shape)
        self.inputs = (latent.to(dev, dtype), t.to(dev), text.to(dev, dtype))
        self.models, self.results = [], []
        with torch.no_grad():
            self.reference = forward_by_stages(spec.source.dit(dev), *self.inputs)
            self.group = world_group(ctx.rank, ctx.world_size)  # every rank one TP group
            for _, v in plans:
                model = build_variant(v, spec, self.group, ctx.wire)
                with CollectiveCounter() as counter:
                    out = forward_by_stages(model, *self.inputs)
                self.models.append(model)
                self.results.append(VariantResult(
                    v.name, out.cpu(), (out - self.reference).abs().max().item(),
                    local_param_count(model), counter.count, counter.bytes))
            if spec.trace:  # the collective styles, eager (the single-device model has none)
                for (_, v), model, res in zip(plans, self.models, self.results, strict=True):
                    if not v.compiled and v.style != "single":
                        _trace(res, model, self.inputs, spec, ctx.placement)

    @torch.no_grad()
    def warm_up(self, i: int) -> None:
        """Compile (a compiled variant) and check the compiled output; then warm-up forwards."""
        spec, v = self.plans[i]
        model, res = self.models[i], self.results[i]
        if v.compiled:
            before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
            with timed(self.ctx.placement) as t:  # compile, and the first forward's kernels
                out = forward_by_stages(compile_blocks(model), *self.inputs)
            res.compile_s = t.seconds
            res.graphs_compiled = torch._dynamo.utils.counters["stats"]["unique_graphs"] - before
            res.output = out.cpu()
            res.max_abs_diff = (out - self.reference).abs().max().item()
        for _ in range(spec.warmup):
            forward_by_stages(model, *self.inputs)

    @torch.no_grad()
    def run(self, i: int, tracer) -> float:
        """``repeats`` timed forwards; the round keeps their median (seconds)."""
        spec = self.plans[i][0]
        times = []
        for _ in range(spec.repeats):
            with timed(self.ctx.placement) as t:
                forward_by_stages(self.models[i], *self.inputs)
            times.append(t.seconds)
        self.results[i].forward_s.append(statistics.median(times))
        return self.results[i].forward_s[-1]

    def result(self, i: int) -> VariantResult:
        return self.results[i]


def _jobs(spec: TPCompare) -> dict[str, tuple[TPCompare, TPVariant]]:
    return {v.name: (spec, v) for v in spec.variants}


def tp_compare_on_rank(ctx: RankContext, spec: TPCompare) -> dict[str, VariantResult]:
    """Run ``spec`` in a worker already running on every rank: this rank's results by variant."""
    jobs = _jobs(spec)
    out = rounds_worker(ctx, Job(TPCompareRunner, tuple(jobs.values()), spec.rounds))
    return dict(zip(jobs, out.results, strict=True))


def _trace(result: VariantResult, model, inputs, spec: TPCompare, placement: Placement) -> None:
    """Graph breaks of block 0 (with the block's graph collectives) and, if the spec asks, of
    the whole forward (Dynamo runs what it traces: ``trace_s`` is timed on the rank's device)."""
    with timed(placement) as t:
        hidden, c = prologue(model, *inputs)
        result.block_trace = trace_report(
            model.blocks[0], hidden, c.text, c.timestep_proj, c.rotary_emb,
            collectives=True if spec.trace_broken_collectives else "if_whole")
        if spec.trace_forward:
            result.forward_trace = trace_report(partial(forward_by_stages, model), *inputs,
                                                collectives=False)
    result.trace_s = t.seconds


def speedup(results: dict[str, VariantResult], fast: str, base: str) -> float:
    """Median over timing rounds of time(base) / time(fast): > 1 means ``fast`` is faster.
    Per-round ratios first, so a round slowed by a neighbour's load slows both sides."""
    return median_ratio(results[base].forward_s, results[fast].forward_s)


def run_tp_compare(spec: TPCompare, tp: int, **launch_kwargs) -> list[dict[str, VariantResult]]:
    """Launch ``tp`` ranks (a thread each unless told otherwise), run ``spec``: results by rank."""
    use_project_compile_cache()
    launch_kwargs.setdefault("timeout_s", 600)
    runs = run_side_by_side(_jobs(spec), runner=TPCompareRunner, world_size=tp,
                            rounds=spec.rounds, **launch_kwargs)
    return [{name: r.results[rank] for name, r in runs.items()} for rank in range(tp)]
