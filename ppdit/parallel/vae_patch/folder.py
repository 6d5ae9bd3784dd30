"""The patch-parallel decode of a generated latent, with a pipeline folder's VAE:
``ppdit generate --vae-ranks N``.

After the denoising ranks end, ``decode_on_ranks`` launches ``N`` ranks; each loads the folder's
VAE (a few hundred MB for Wan: every rank holds it whole, it is the activations that are big),
decodes its own rows of every frame with its own causal caches, and rank 0 gathers the pixels.
The caller un-normalises the latent before and post-processes the video after, exactly as for
the one-device decode, so the two differ only by ``PATCH_TOL``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ppdit.checkpoint.folder import load_folder
from ppdit.parallel.vae_patch.decode import decode_patch_parallel
from ppdit.parallel.vae_patch.halo import RowGroup
from ppdit.runtime.observe.memory import track_peak_memory
from ppdit.runtime.observe.timing import timed
from ppdit.runtime.processes.launch import launch
from ppdit.runtime.processes.rank import RankContext


@dataclass(frozen=True)
class FolderDecodeJob:
    """What every decode rank is given: the folder and the whole latent."""

    folder: str
    latent: torch.Tensor  # (1, z, F, H, W), un-normalised as the VAE reads it, fp32
    chunk_frames: int = 1  # 1: diffusers' per-frame loop, equal to decode_full up to PATCH_TOL


@dataclass
class RanksDecode:
    """The decoded video (rank 0's gather) and each rank's cost."""

    video: torch.Tensor  # (1, 3, T, H, W): the decoder's raw output, before post-processing
    peak_bytes: list[int]  # per rank: tensor bytes above its weights and the latent
    seconds: list[float]  # per rank: its decode, halos and gather included


def setup_folder_vae(rank: int, world_size: int, job: FolderDecodeJob):
    """``launch``'s setup: each rank reads the VAE before the process group exists."""
    return load_folder(job.folder, parts=("vae",)).vae


def folder_decode_worker(ctx: RankContext, job: FolderDecodeJob):
    """One rank: its rows of every frame; rank 0 returns the gathered video."""
    vae = ctx.prepared.to(ctx.placement.device)
    latent = job.latent.to(ctx.placement.device).contiguous()
    rows = RowGroup.of(None, rules=ctx.rules)
    with track_peak_memory(ctx.placement) as mem, timed(ctx.placement) as clock:
        video = decode_patch_parallel(vae, latent, chunk_frames=job.chunk_frames,
                                      gather="first", rows=rows)
    return None if video is None else video.cpu(), mem.peak_bytes, clock.seconds


def decode_on_ranks(folder: str, latent: torch.Tensor, ranks: int, *, chunk_frames: int = 1,
                    **launch_kwargs) -> RanksDecode:
    """Decode ``latent`` (un-normalised) split by rows over ``ranks`` fresh ranks.

    ``launch_kwargs`` go to ``launch`` (``device``, ``nccl_rules``, ``pool``...).
    """
    launch_kwargs.setdefault("echo", False)
    job = FolderDecodeJob(str(folder), latent.detach().float().cpu().contiguous(), chunk_frames)
    out = launch(folder_decode_worker, ranks, args=(job,), setup=setup_folder_vae,
                 **launch_kwargs)
    return RanksDecode(out[0][0], [p for _, p, _ in out], [s for _, _, s in out])


__all__ = ["FolderDecodeJob", "RanksDecode", "decode_on_ranks", "folder_decode_worker",
           "setup_folder_vae"]
