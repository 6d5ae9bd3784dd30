"""One forward pass of the DiT three ways on the same ranks, timed side by side: one device,
Ulysses sequence parallelism (with and without V-first), tensor parallelism.

Every variant runs in the same launch, interleaved round by round, on identical weights and
inputs, so their ratios mean something on a shared machine. Used by notebook 12 and
``benchmarks/sequence_parallel.py``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ppdit.model import build_model, forward_by_stages, get_preset
from ppdit.parallel.sequence import install_ulysses, sp_forward, uninstall_ulysses
from ppdit.parallel.sequence_comms import even_split
from ppdit.runtime.launch import RankContext, launch
from ppdit.runtime.trace import RankTrace, Tracer

VARIANTS = ("one device", "SP, V-first", "SP, V last", "TP")


@dataclass(frozen=True)
class LayoutCompare:
    """What to run: a preset, a latent shape, forwards per round, rounds."""

    preset: str = "small"
    latent_shape: tuple[int, ...] = (1, 16, 8, 32, 32)  # 2,048 tokens: attention matters
    forwards: int = 2
    rounds: int = 3


def setup_compare(rank: int, world_size: int, spec: LayoutCompare):
    """Two identical copies of the model: one for SP (and one device), one to shard for TP."""
    return build_model(spec.preset, seed=0), build_model(spec.preset, seed=0)


def compare_worker(ctx: RankContext, spec: LayoutCompare) -> dict:
    """Seconds per forward of each variant per round (rank 0), plus a traced SP forward each
    way (every rank)."""
    from ppdit.parallel.tensor import parallelize_wan

    full, tp_model = ctx.prepared
    tp_model = parallelize_wan(tp_model, tp_group=dist.group.WORLD)
    world = dist.group.WORLD
    g = torch.Generator().manual_seed(0)
    p = get_preset(spec.preset)
    x = torch.randn(spec.latent_shape, generator=g)
    t = torch.tensor([500.0])
    text = torch.randn(1, p.text_len, p.text_dim, generator=g)
    split = even_split(p.num_tokens(spec.latent_shape), ctx.world_size)
    runs = {
        "one device": lambda: forward_by_stages(full, x, t, text) if ctx.rank == 0 else None,
        "SP, V-first": lambda: sp_forward(full, x, t, text, world, split),
        "SP, V last": lambda: sp_forward(full, x, t, text, world, split),
        "TP": lambda: forward_by_stages(tp_model, x, t, text),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    with torch.no_grad():
        for k in range(spec.rounds):
            for i in [(k + j) % len(runs) for j in range(len(runs))]:
                name = VARIANTS[i]
                if name == "one device":
                    uninstall_ulysses(full)
                else:
                    install_ulysses(full, world, split, v_first=name != "SP, V last")
                dist.barrier()
                start = time.perf_counter()
                for _ in range(spec.forwards):
                    runs[name]()
                times[name].append((time.perf_counter() - start) / spec.forwards)
        traces = {}
        for v_first in (True, False):
            tracer = Tracer(ctx.rank, ctx.placement)
            install_ulysses(full, world, split, v_first=v_first, tracer=tracer)
            dist.barrier()
            tracer.align()
            sp_forward(full, x, t, text, world, split)
            traces[v_first] = tracer.finish()
    return {"times": times, "traces": traces}


@dataclass
class CompareResult:
    """Median seconds per forward of each variant, and ratios against one device."""

    seconds: dict[str, float]
    rounds: dict[str, list[float]]
    traces: dict[bool, list[RankTrace]]

    def speedup(self, name: str, base: str = "one device") -> float:
        """Median over rounds of base time / variant time."""
        return statistics.median(b / v for b, v in zip(self.rounds[base], self.rounds[name],
                                                       strict=True))


def run_compare(spec: LayoutCompare, world_size: int = 2, **launch_kwargs) -> CompareResult:
    """Launch ``world_size`` ranks (one thread each) and compare the layouts."""
    launch_kwargs.setdefault("threads_per_rank", 1)
    launch_kwargs.setdefault("timeout_s", 600)
    out = launch(compare_worker, world_size, args=(spec,), setup=setup_compare, **launch_kwargs)
    rounds = out[0]["times"]
    return CompareResult({k: statistics.median(v) for k, v in rounds.items()}, rounds,
                         {vf: [o["traces"][vf] for o in out] for vf in (True, False)})
