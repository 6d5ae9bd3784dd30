"""Where a bring-up run's weights and prompts come from: random presets with seeded stand-in
prompts (the shape and timing lessons), or a trained pipeline folder with text prompts (the
demo's default, ``models/toy_shapes``: a video you can see)."""

from __future__ import annotations

import torch

from ppdit.sampler import Request
from ppdit.serve.config import BringupConfig


def load_dit(cfg: BringupConfig):
    """The mesh's transformer."""
    return cfg.source.dit()


def load_vae(cfg: BringupConfig):
    """Rank 0's VAE (fp32), or None when the controller does not decode."""
    return cfg.source.vae() if cfg.decode else None


@torch.no_grad()
def stream_prompts(cfg: BringupConfig) -> dict[int, torch.Tensor]:
    """Each video's prompt embeddings (1, L, text_dim), by video index: a folder encodes the
    text prompts (``WanPipeline``'s arithmetic), a preset draws seeded stand-ins."""
    requests = [Request(v, s) for v, s in enumerate(cfg.seeds)]
    return dict(enumerate(cfg.source.prompts(requests, cfg.prompts)))


__all__ = ["load_dit", "load_vae", "stream_prompts"]
