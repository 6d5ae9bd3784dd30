"""One forward pass of the DiT several ways on the same ranks, timed side by side: one device,
Ulysses sequence parallelism (with and without V-first), tensor parallelism, and on request
ring attention (``RING``: sequence parallelism for any head count).

Every variant runs in the same launch, interleaved round by round, on identical weights and
inputs, so their ratios mean something on a shared machine. Used by notebook 06 and
``benchmarks/sequence_parallel.py``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch

from ppdit.attention import use_diffusers_attention
from ppdit.checkpoint.source import ModelSource
from ppdit.model import forward_by_stages, torch_dtype
from ppdit.parallel.sequence.comms import even_split
from ppdit.parallel.sequence.ring import install_ring
from ppdit.parallel.sequence.ulysses import install_ulysses, sp_forward
from ppdit.parallel.share import check_plans
from ppdit.parallel.tensor.parallelize import parallelize_wan
from ppdit.runtime.comm.mesh import world_group
from ppdit.runtime.observe.timing import timed, warm_up_pairs
from ppdit.runtime.observe.trace import RankTrace, Tracer
from ppdit.runtime.processes.rank import RankContext
from ppdit.runtime.rounds import Runner, median_ratio, run_side_by_side

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


class CompareRunner(Runner):
    """The variants of a ``LayoutCompare`` on one rank; the job's plans are (spec, variant)."""

    check = staticmethod(check_plans)

    @staticmethod
    def prepare(rank: int, world_size: int, plans):
        """Two identical copies of the model: one for SP (and one device), one to shard for TP."""
        spec = plans[0][0]
        return tuple(spec.source.dit() for _ in range(2))

    def __init__(self, ctx: RankContext, plans):
        super().__init__(ctx, plans)
        spec = self.spec = plans[0][0]
        full, tp_model = ctx.prepared or self.prepare(ctx.rank, ctx.world_size, plans)
        self.full = full.to(ctx.device)
        self.world = world_group(ctx.rank, ctx.world_size)  # one group of every rank
        self.tp_model = parallelize_wan(tp_model.to(ctx.device), tp_group=self.world,
                                        wire=ctx.wire)
        g = torch.Generator().manual_seed(0)
        p = spec.source.spec
        dtype = torch_dtype(spec.source.dtype)
        self.x = torch.randn(spec.latent_shape, generator=g).to(ctx.device, dtype)
        self.t = torch.tensor([500.0], device=ctx.device)
        self.text = torch.randn(1, p.text_len, p.text_dim, generator=g).to(ctx.device, dtype)
        self.split = even_split(p.num_tokens(spec.latent_shape), ctx.world_size)
        self.warm = False

    def warm_up(self, i: int) -> None:
        """Once, before any round: one exchange on the group the SP all-to-alls and the TP
        all-reduces share, so that NCCL's lazy set-up of its communicator is not timed."""
        if not self.warm:
            warm_up_pairs(self.ctx.wire, [], self.ctx.rank, group=self.world)
            self.warm = True

    def _forward(self, name: str, tracer: Tracer | None = None) -> None:
        if name == "one device":
            use_diffusers_attention(self.full)
            if self.ctx.rank == 0:
                forward_by_stages(self.full, self.x, self.t, self.text)
        elif name == "TP":
            forward_by_stages(self.tp_model, self.x, self.t, self.text)
        elif name == RING:
            install_ring(self.full, self.world, self.split, self.ctx.wire)
            sp_forward(self.full, self.x, self.t, self.text, self.world, self.split, self.ctx.wire)
        else:
            install_ulysses(self.full, self.world, self.split, v_first=name != "SP, V last",
                            tracer=tracer, wire=self.ctx.wire)
            if tracer is not None:
                tracer.align()
            sp_forward(self.full, self.x, self.t, self.text, self.world, self.split, self.ctx.wire)

    @torch.no_grad()
    def run(self, i: int, tracer: Tracer) -> float:
        """Seconds per forward of variant ``i`` in this round."""
        name = self.plans[i][1]
        with timed(self.ctx.placement) as t:
            for _ in range(self.spec.forwards):
                self._forward(name)
        return t.seconds / self.spec.forwards

    @torch.no_grad()
    def result(self, i: int):
        """For the two SP variants: one traced forward (every rank), to draw the timeline."""
        name = self.plans[i][1]
        if name not in ("SP, V-first", "SP, V last"):
            return None
        tracer = Tracer(self.ctx.rank, self.ctx.placement)
        self._forward(name, tracer)
        return tracer.finish()


@dataclass
class CompareResult:
    """Median seconds per forward of each variant, and ratios against one device."""

    seconds: dict[str, float]
    rounds: dict[str, list[float]]
    traces: dict[bool, list[RankTrace]]

    def speedup(self, name: str, base: str = "one device") -> float:
        """Median over rounds of base time / variant time."""
        return median_ratio(self.rounds[base], self.rounds[name])


def run_compare(spec: LayoutCompare, world_size: int = 2, **launch_kwargs) -> CompareResult:
    """Launch ``world_size`` ranks (one thread each) and compare the layouts."""
    launch_kwargs.setdefault("timeout_s", 600)
    runs = run_side_by_side({v: (spec, v) for v in spec.variants}, runner=CompareRunner,
                            world_size=world_size, rounds=spec.rounds, **launch_kwargs)
    rounds = {v: runs[v].outputs[0] for v in spec.variants}
    traces = {vf: [runs[name].results[r] for r in range(world_size)]
              for vf, name in ((True, "SP, V-first"), (False, "SP, V last")) if name in runs}
    return CompareResult({k: statistics.median(v) for k, v in rounds.items()}, rounds, traces)
