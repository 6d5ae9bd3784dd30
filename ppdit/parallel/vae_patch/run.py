"""The patch-parallel decode from the caller's side: launch ranks, decode, measure, compare.

``run_patch_decode(cases, world_size)`` starts ``world_size`` ranks that each build the same
seeded VAE (before the process group exists, as ``launch``'s ``setup`` allows), decode every
latent case with every chunk size (the whole video gathered on every rank), and measure each rank's
peak tensor bytes of one decode (``ppdit.runtime.observe.memory``). ``group_sizes`` repeats all that
over the first n ranks for each n: one launch, several splits. ``one_process_decode`` is the
reference: ``decode_full`` and its peak, measured the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from diffusers import AutoencoderKLWan

from ppdit.parallel.vae_patch.decode import decode_patch_parallel
from ppdit.parallel.vae_patch.halo import RowGroup
from ppdit.runtime.observe.memory import track_peak_memory
from ppdit.runtime.processes.launch import launch
from ppdit.runtime.processes.rank import RankContext
from ppdit.vae.presets import build_vae
from ppdit.vae.streaming import decode_full


@dataclass(frozen=True)
class PatchJob:
    """What the ranks decode: the same VAE, the same latents (every rank holds them whole)."""

    cases: tuple[torch.Tensor, ...]  # latents (B, z, F, H, W), one decode per case and chunk
    chunk_frames: tuple[int, ...] = (1,)  # 1: diffusers' per-frame loop; > 1: streamed chunks
    # Decode over the first n ranks, for each n here (n < the world: a subgroup of them), so one
    # launch checks several splits; the other ranks wait.
    group_sizes: tuple[int, ...] = ()  # () : all the ranks
    preset: str = "tiny"
    seed: int = 0
    memory: bool = True  # measure peak bytes (case 0, chunk_frames[0]); slows dispatch a little


@dataclass
class RankPeaks:
    """One rank's peak tensor bytes while decoding case 0 (above the weights and latents)."""

    rows: int  # decoding its own rows, nothing gathered
    gathered: int  # the same, then the whole video gathered on rank 0


@dataclass
class PatchRun:
    """Merged outcome, per group size n: rank 0's whole videos, and the n ranks' peaks."""

    # (n, case index, chunk_frames) -> (B, 3, T, H', W') as gathered on rank 0
    videos: dict[tuple[int, int, int], torch.Tensor]
    same_everywhere: bool  # every rank of each group gathered the very same videos
    peaks: dict[int, list[RankPeaks]] = field(default_factory=dict)  # n -> peaks by rank


def setup_vae(rank: int, world_size: int, job: PatchJob) -> AutoencoderKLWan:
    """``launch``'s setup hook: every rank builds the same VAE before the group exists."""
    return build_vae(job.preset, seed=job.seed)


def patch_worker(ctx: RankContext, job: PatchJob) -> tuple[dict, dict]:
    """Every rank, for every group size it belongs to: every case and chunk size gathered on
    every rank, then the memory runs."""
    videos, peaks = {}, {}
    for n in job.group_sizes or (ctx.world_size,):
        # new_group is collective: every rank makes every group, members or not
        group = dist.new_group(list(range(n))) if n < ctx.world_size else None
        if ctx.rank < n:
            rows = RowGroup.of(group, rules=ctx.rules)
            videos.update(_decode_cases(ctx.prepared, job, rows, n))
            if job.memory:
                peaks[n] = RankPeaks(*(_peak(ctx.prepared, job, g, rows, ctx)
                                       for g in ("none", "first")))
    return videos, peaks


def _decode_cases(vae: AutoencoderKLWan, job: PatchJob, rows: RowGroup, n: int) -> dict:
    out = {}
    for i, latents in enumerate(job.cases):
        for k in job.chunk_frames:
            out[(n, i, k)] = decode_patch_parallel(vae, latents, chunk_frames=k, gather="all",
                                                   rows=rows)
    return out


def _peak(vae: AutoencoderKLWan, job: PatchJob, gather: str, rows: RowGroup,
          ctx: RankContext) -> int:
    with track_peak_memory(ctx.placement) as mem:
        decode_patch_parallel(vae, job.cases[0], chunk_frames=job.chunk_frames[0],
                              gather=gather, rows=rows)
    return mem.peak_bytes


def run_patch_decode(cases: Sequence[torch.Tensor], world_size: int, *,
                     group_sizes: Sequence[int] = (), chunk_frames: Sequence[int] = (1,),
                     preset: str = "tiny", seed: int = 0, memory: bool = True,
                     **launch_kwargs) -> PatchRun:
    """Launch ``world_size`` ranks and decode every case row-split over the first n ranks,
    for each n in ``group_sizes`` (default: all of them).

    ``launch_kwargs`` go to ``launch`` (``pool=`` to reuse live ranks); ranks get
    one thread each unless ``threads_per_rank`` says otherwise.
    """
    if any(not 1 <= n <= world_size for n in group_sizes):
        raise ValueError(f"group_sizes={tuple(group_sizes)} must lie in 1..{world_size}")
    launch_kwargs.setdefault("threads_per_rank", 1)
    launch_kwargs.setdefault("echo", False)
    job = PatchJob(tuple(c.contiguous() for c in cases), tuple(chunk_frames),
                   tuple(group_sizes), preset, seed, memory)
    per_rank = launch(patch_worker, world_size, args=(job,), setup=setup_vae, **launch_kwargs)
    peaks: dict[int, list[RankPeaks]] = {}
    for _, rank_peaks in per_rank:  # in rank order
        for n, p in rank_peaks.items():
            peaks.setdefault(n, []).append(p)
    videos = per_rank[0][0]
    same = all(torch.equal(v, videos[key]) for theirs, _ in per_rank for key, v in theirs.items())
    return PatchRun(videos, same, peaks)


def one_process_decode(vae: AutoencoderKLWan, latents: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The reference: ``decode_full`` on this process, and its peak tensor bytes."""
    with track_peak_memory() as mem:
        video = decode_full(vae, latents)
    return video, mem.peak_bytes


def max_abs_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest elementwise difference (0.0 means bitwise equal for finite tensors)."""
    return (a - b).abs().max().item()


__all__ = ["PatchJob", "PatchRun", "RankPeaks", "max_abs_error", "one_process_decode",
           "patch_worker", "run_patch_decode", "setup_vae"]
