"""TP variants side by side on real ranks: equality with one device, parameters, collectives,
graph breaks, compile time and forward time, from one launch.

A *variant* is a collective style (``"single"`` = the unsharded model on each rank, the
reference; ``"funcol"``, ``"c10d"``, ``"c10d_async"``; ``"dtensor"``) and eager or compiled.
Each rank builds every variant from the same seed, so all of them start from identical weights.
Timed rounds are interleaved (round k starts at variant k mod n) so a slow minute on a shared
machine slows every variant, not one; forward times are medians.

Order inside a rank, and why: build every variant eagerly -> check outputs and count
collectives -> trace graph breaks (``torch._dynamo.explain`` resets Dynamo, which would throw
away compiled code, so it runs before any compile) -> compile -> timed rounds.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.distributed as dist

from ppdit.model import build_model, forward_by_stages, get_preset, prologue
from ppdit.parallel.tensor import compile_blocks, local_param_count, parallelize_wan
from ppdit.parallel.tensor_comms import CollectiveCounter, TraceReport, trace_report
from ppdit.parallel.tensor_dtensor import parallelize_wan_dtensor
from ppdit.runtime.compile_cache import use_project_compile_cache
from ppdit.runtime.launch import RankContext, launch
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
class TPCompare:
    """What to run: variants, model, input, and how much to measure."""

    variants: tuple[TPVariant, ...]
    preset: str = "tiny"
    model_seed: int = 0
    latent_shape: tuple[int, ...] | None = None  # None: the preset's default (1 sample)
    rounds: int = 3  # interleaved timing rounds (0: no timing)
    repeats: int = 3  # timed forwards per variant and round; the round keeps the median
    warmup: int = 1  # untimed forwards after building (and compiling) a variant
    trace: bool = False  # graph breaks of one block and of the forward, per eager TP style

    def __post_init__(self) -> None:
        get_preset(self.preset)
        if len({v.name for v in self.variants}) != len(self.variants):
            raise ValueError("variants must be distinct")

    @property
    def shape(self) -> tuple[int, ...]:
        """The latent shape the forwards use."""
        return tuple(self.latent_shape or get_preset(self.preset).latent_shape)


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


def build_variant(variant: TPVariant, spec: TPCompare, group: dist.ProcessGroup,
                  device: torch.device):
    """The model for ``variant`` on this rank, not yet compiled."""
    model = build_model(spec.preset, seed=spec.model_seed).to(device)
    if variant.style == "single":
        return model
    if variant.style == "dtensor":
        return parallelize_wan_dtensor(model, tp_group=group, device_type=device.type)
    return parallelize_wan(model, tp_group=group, collectives=variant.style)


def tp_compare_worker(ctx: RankContext, spec: TPCompare) -> dict[str, VariantResult]:
    """Run ``spec`` on this rank with the whole world as the TP group (see module docstring)."""
    use_project_compile_cache()
    group, dev = dist.group.WORLD, ctx.device
    inputs = tuple(x.to(dev) for x in example_inputs(spec.preset, spec.shape))
    forward = forward_by_stages  # the stage view, == model(...) (tests/test_model.py)
    with torch.no_grad():
        reference = forward(build_model(spec.preset, seed=spec.model_seed).to(dev), *inputs)
        models, results = {}, {}
        for v in spec.variants:
            models[v.name] = m = build_variant(v, spec, group, dev)
            with CollectiveCounter() as counter:
                out = forward(m, *inputs)
            results[v.name] = VariantResult(
                v.name, out.cpu(), (out - reference).abs().max().item(), local_param_count(m),
                counter.count, counter.bytes)
        if spec.trace:  # the collective styles, eager (the single-device model has none)
            for v in spec.variants:
                if not v.compiled and v.style != "single":
                    _trace(results[v.name], models[v.name], inputs)
        for v in spec.variants:
            if v.compiled:
                start = time.perf_counter()
                out = forward(compile_blocks(models[v.name]), *inputs)
                results[v.name].compile_s = time.perf_counter() - start
                results[v.name].output = out.cpu()
                results[v.name].max_abs_diff = (out - reference).abs().max().item()
        for v in spec.variants:
            for _ in range(spec.warmup):
                forward(models[v.name], *inputs)
        names = list(models)
        for k in range(spec.rounds):
            for name in names[k % len(names):] + names[:k % len(names)]:
                dist.barrier()
                times = []
                for _ in range(spec.repeats):
                    ctx.placement.synchronize()
                    start = time.perf_counter()
                    forward(models[name], *inputs)
                    ctx.placement.synchronize()
                    times.append(time.perf_counter() - start)
                results[name].forward_s.append(statistics.median(times))
    return results


def _trace(result: VariantResult, model, inputs) -> None:
    """Graph breaks of block 0 and of the whole forward (plus the block's graph collectives)."""
    start = time.perf_counter()
    hidden, c = prologue(model, *inputs)
    result.block_trace = trace_report(model.blocks[0], hidden, c.text, c.timestep_proj,
                                      c.rotary_emb)
    result.forward_trace = trace_report(partial(forward_by_stages, model), *inputs,
                                        collectives=False)
    result.trace_s = time.perf_counter() - start


def speedup(results: dict[str, VariantResult], fast: str, base: str) -> float:
    """Median over timing rounds of time(base) / time(fast): > 1 means ``fast`` is faster.
    Per-round ratios first, so a round slowed by a neighbour's load slows both sides."""
    pairs = zip(results[fast].forward_s, results[base].forward_s, strict=True)
    return statistics.median(b / f for f, b in pairs)


def run_tp_compare(spec: TPCompare, tp: int, **launch_kwargs) -> list[dict[str, VariantResult]]:
    """Launch ``tp`` ranks (one thread each unless told otherwise) and run ``spec``; returns
    every rank's results (index = rank)."""
    use_project_compile_cache()
    launch_kwargs.setdefault("threads_per_rank", 1)
    launch_kwargs.setdefault("timeout_s", 600)
    return launch(tp_compare_worker, tp, args=(spec,), **launch_kwargs)


__all__ = ["STYLES", "TPCompare", "TPVariant", "VariantResult", "build_variant",
           "example_inputs", "run_tp_compare", "speedup", "tp_compare_worker"]
