"""One device, Ulysses (V-first and V last), TP and on request ring attention (``RING``), each a
``LayoutPlan`` of a few single forwards (steps without guidance), timed side by side by the one
runner (``runner.run_layouts``): the numbers lessons 06 and the benchmarks print come from the
code ``ppdit generate`` runs.

Every variant runs in the same launch, interleaved round by round, on identical weights and
inputs, so their ratios mean something on a shared machine.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ppdit.checkpoint.source import ModelSource
from ppdit.parallel.layout import Layout
from ppdit.parallel.runner import LayoutPlan, run_layouts
from ppdit.runtime.observe.trace import Trace
from ppdit.runtime.rounds import median_ratio
from ppdit.sampler import SamplingConfig

VARIANTS = ("one device", "SP, V-first", "SP, V last", "TP")
RING = "SP, ring"  # opt in: LayoutCompare(variants=(*VARIANTS, RING))


@dataclass(frozen=True)
class LayoutCompare:
    """What to run: a model, a latent shape, forwards per round, rounds."""

    source: ModelSource = field(default_factory=lambda: ModelSource("small"))
    latent_shape: tuple[int, ...] = (1, 16, 8, 32, 32)  # 2,048 tokens: attention matters
    forwards: int = 2
    rounds: int = 3
    variants: tuple[str, ...] = VARIANTS  # a subset of VARIANTS + (RING,); "one device" first

    def __post_init__(self) -> None:
        unknown = set(self.variants) - {*VARIANTS, RING}
        if unknown or not self.variants or self.variants[0] != "one device":
            raise ValueError(f"variants={self.variants}: 'one device' first, then any of "
                             f"{(*VARIANTS[1:], RING)} (unknown: {sorted(unknown)})")

    def plan(self, variant: str, ranks: int) -> LayoutPlan:
        """The variant as a plan: ``forwards`` unguided steps of the source's model."""
        layout, v_first = {"one device": (Layout(), True), "TP": (Layout(tp=ranks), True),
                           RING: (Layout(ring=ranks), True),
                           "SP, V-first": (Layout(ulysses=ranks), True),
                           "SP, V last": (Layout(ulysses=ranks), False)}[variant]
        return LayoutPlan(layout=layout, source=self.source, latent_shape=self.latent_shape,
                          sampling=SamplingConfig(num_steps=self.forwards), v_first=v_first)


@dataclass
class CompareResult:
    """Seconds per forward of each variant round by round (medians in ``seconds``), and the
    Ulysses variants' last timelines (``traces[v_first]``)."""

    seconds: dict[str, float]
    rounds: dict[str, list[float]]
    traces: dict[bool, Trace]

    def speedup(self, name: str, base: str = "one device") -> float:
        """Median over rounds of base time / variant time."""
        return median_ratio(self.rounds[base], self.rounds[name])


def run_compare(spec: LayoutCompare, world_size: int = 2, **launch_kwargs) -> CompareResult:
    """Launch ``world_size`` ranks (one thread each) and compare the layouts."""
    launch_kwargs.setdefault("timeout_s", 600)
    res = run_layouts({v: spec.plan(v, world_size) for v in spec.variants}, spec.rounds,
                      **launch_kwargs)
    rounds = {v: [s / spec.forwards for s in res[v].seconds] for v in spec.variants}
    traces = {vf: res[name].trace for vf, name in ((True, "SP, V-first"), (False, "SP, V last"))
              if name in res}
    return CompareResult({k: statistics.median(v) for k, v in rounds.items()}, rounds, traces)
