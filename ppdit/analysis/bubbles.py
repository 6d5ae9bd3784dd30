"""Pipeline arithmetic: ideal schedules, speedups and bubble fractions, from first principles.

A pipeline of P equal stages processing M work items finishes after (M + P - 1) stage-times
(P - 1 to fill, M to stream through); one device needs M * P. Hence the GPipe bubble

    speedup = M P / (M + P - 1)        bubble = idle share = (P - 1) / (M + P - 1)

Step-split PP with pipeline filling is exactly this with M = requests. Layer-split PP repeats it
every step: with V virtual chunks per rank and N steps, one flushed step takes
max(M, P) + (min(M, P) - 1) / V stage-times (M >= P: M + (P - 1)/V, Megatron's interleaving);
wrapping micro-batches straight back to the first stage removes every drain but the last:
N max(M, P) + (min(M, P) - 1) / V in all. The bubble is 1 - N M / (that time)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ppdit.checkpoint.source import ModelSource
from ppdit.parallel.layer_split.schedule import LayerSplitPlan, SimSpan, simulate
from ppdit.sampler import Request, SamplingConfig


def ideal_speedup(num_items: int, num_stages: int) -> float:
    """Throughput of a filled P-stage pipeline over one device doing the same M items."""
    _check(num_items, num_stages)
    return num_items * num_stages / (num_items + num_stages - 1)


def bubble_fraction(num_items: int, num_stages: int) -> float:
    """Share of stage-time spent idle while filling and draining: (P - 1) / (M + P - 1)."""
    _check(num_items, num_stages)
    return (num_stages - 1) / (num_items + num_stages - 1)


def uneven_speedup(num_items: int, stage_steps: list[int]) -> float:
    """Step split with stages of unequal length (Wan 2.2 cut at its expert boundary): one
    device takes M n step-times; the pipeline takes n for the first item, then one per longest
    stage, M n / (n + (M - 1) max). 26 + 14 steps, M = 8: 1.44x, not 2 x 8 / 9 = 1.78x."""
    n = sum(stage_steps)
    return num_items * n / (n + (num_items - 1) * max(stage_steps))


def replicated_speedup(num_items: int, num_gpus: int, stage_steps: list[int]) -> float:
    """Throughput over one device of ``num_gpus`` GPUs holding G / P copies of one P-stage
    pipeline (``[n]``: a whole model per GPU, plain replicas), the M requests dealt evenly:
    each copy runs ceil(M / copies) of them, so M n / (n + (ceil(M / copies) - 1) max).
    Wan 2.2, 8 requests on 2 GPUs: two whole copies 2.00x, its expert cut 26 + 14 1.44x."""
    if num_gpus % len(stage_steps):
        raise ValueError(f"{num_gpus} GPUs do not hold whole copies of a "
                         f"{len(stage_steps)}-stage pipeline (GPUs % stages must be 0)")
    per_copy = math.ceil(num_items / (num_gpus // len(stage_steps)))
    return num_items / per_copy * uneven_speedup(per_copy, stage_steps)


def cached_time_share(skipped: float, num_blocks: int, block_share: float = 1.0) -> float:
    """A cached run's time over the exact run's, when a ``skipped`` share of the forwards ran
    only the first of ``num_blocks`` blocks and blocks are ``block_share`` of the time (1: Wan
    14B at 480p, where the roofline puts the prologue, epilogue and solver under 1%)."""
    return 1 - skipped * block_share * (num_blocks - 1) / num_blocks


def layer_split_time(num_micro: int, num_stages: int, virtual: int = 1, steps: int = 1,
                     wrap: bool = False) -> float:
    """Ideal makespan, in stage-times, of N denoising steps of layer-split PP (formulas above)."""
    _check(num_micro, num_stages)
    m, p = num_micro, num_stages
    tail = (min(m, p) - 1) / virtual
    return steps * max(m, p) + tail if wrap else steps * (max(m, p) + tail)


def layer_split_bubble(num_micro: int, num_stages: int, virtual: int = 1, steps: int = 1,
                       wrap: bool = False) -> float:
    """Idle share of layer-split PP: 1 - N M / time. With V = 1, no wrap: (P-1)/(M+P-1)."""
    t = layer_split_time(num_micro, num_stages, virtual, steps, wrap)
    return 1 - steps * num_micro / t


def pipefusion_bubble(num_patches: int, num_stages: int, steps: int, warmup: int = 0) -> float:
    """Idle share of PipeFusion, each step flushed (the next step's patch needs the whole
    updated latent on the last stage first): a warm-up step runs whole through the P stages
    (P stage-times for 1 of work a stage), a displaced one as M patches of 1/M each (M + P - 1
    patch-times): 1 - N / (W P + (N - W)(M + P - 1) / M)."""
    m, p = num_patches, num_stages
    return 1 - steps / (warmup * p + (steps - warmup) * (m + p - 1) / m)


def measured_bubble(trace, num_stages: int | None = None, kinds=("compute",)) -> float:
    """1 - busy / (P x window) from real compute spans: the bubble a run actually had. The
    window runs from the first compute start to the last compute end over all ranks, so
    start-up and teardown do not count, only the pipeline's own fill, drain and stalls.
    ``kinds``: the spans that count as busy (a rank that also decodes: "compute", "decode")."""
    spans = [s for k in kinds for s in trace.select(k)]
    if not spans:
        raise ValueError("the trace has no compute spans")
    ranks = num_stages or len({s.rank for s in spans})
    start, end = min(s.start_ns for s in spans), max(s.end_ns for s in spans)
    busy = sum(s.end_ns - s.start_ns for s in spans)
    return 1 - busy / (ranks * (end - start))


@dataclass(frozen=True)
class Slot:
    """One item on one stage in an ideal schedule, in units of one stage-time."""
    stage: int
    item: int
    start: float
    end: float


def ideal_schedule(num_items: int, num_stages: int) -> list[Slot]:
    """Item m runs on stage s during [m + s, m + s + 1): the textbook fill / steady / drain."""
    _check(num_items, num_stages)
    return [Slot(s, m, m + s, m + s + 1) for m in range(num_items) for s in range(num_stages)]


def _check(num_items: int, num_stages: int) -> None:
    if num_items < 1 or num_stages < 1:
        raise ValueError(f"need num_items >= 1 and num_stages >= 1, got M={num_items}, "
                         f"P={num_stages}")


# Schedules on a simulated clock (the pictures of lesson 03 are drawn from these)

EXPLORER_PRESET = "wan2.1-14b"  # 40 blocks: room for P x V up to 40; no weights are built


def simulated_plan(num_stages: int, micro: int, virtual: int = 1, steps: int = 2,
                   wrap: bool = False) -> LayerSplitPlan:
    """A plan for schedule pictures: one request per micro-batch, a 40-block model (metadata
    only — nothing is built)."""
    requests = tuple(Request(i, i) for i in range(micro))
    return LayerSplitPlan(requests, num_stages, micro, virtual, wrap,
                          SamplingConfig(num_steps=steps), source=ModelSource(EXPLORER_PRESET))


def simulate_schedule(num_stages: int, micro: int, virtual: int = 1, steps: int = 2,
                      wrap: bool = False, last_stage_slowdown: float = 0.0) -> list[SimSpan]:
    """Simulated spans; the last stage costs ``1 + last_stage_slowdown`` times the others."""
    slow = 1.0 + last_stage_slowdown
    return simulate(simulated_plan(num_stages, micro, virtual, steps, wrap),
                    lambda rank, task: (slow if rank == num_stages - 1 else 1.0) / virtual)
