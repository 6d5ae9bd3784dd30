"""Where a bring-up run's weights and prompts come from: random presets with seeded stand-in
prompts (the shape and timing lessons), or a trained pipeline folder with text prompts (the
demo's default, ``models/toy_shapes``: a video you can see)."""

from __future__ import annotations

from pathlib import Path

import torch

from ppdit.model import build_model
from ppdit.sampler import Request, prompt_embeddings
from ppdit.serve.config import BringupConfig
from ppdit.vae.presets import build_vae


def load_dit(cfg: BringupConfig):
    """The mesh's transformer: the folder's, or the random preset."""
    if cfg.checkpoint is not None:
        return build_model(checkpoint=Path(cfg.checkpoint) / "transformer", dtype=cfg.dtype)
    return build_model(cfg.preset, seed=cfg.model_seed, dtype=cfg.dtype)


def load_vae(cfg: BringupConfig):
    """Rank 0's VAE: the folder's, the random preset, or None (no decode)."""
    if cfg.checkpoint is not None:
        return build_vae(checkpoint=cfg.checkpoint)
    return None if cfg.vae_preset is None else build_vae(cfg.vae_preset, seed=cfg.model_seed)


@torch.no_grad()
def stream_prompts(cfg: BringupConfig) -> dict[int, torch.Tensor]:
    """Each video's prompt embeddings (1, L, text_dim), by video index.

    With a folder: its tokenizer and umT5 encode the text prompts with ``WanPipeline``'s
    arithmetic (pad to the tokenizer's trained length, at most Wan's 512; padding rows zeroed).
    """
    if cfg.checkpoint is None:
        return {v: prompt_embeddings(Request(v, s), cfg.preset) for v, s in enumerate(cfg.seeds)}
    from ppdit.checkpoint.folder import load_folder
    from ppdit.checkpoint.text import encode_text, text_length

    parts = load_folder(cfg.checkpoint, parts=("tokenizer", "text_encoder"))
    length = text_length(parts.tokenizer)
    return {v: encode_text(parts.tokenizer, parts.text_encoder, prompt, length)
            for v, prompt in enumerate(cfg.prompts)}

__all__ = ["load_dit", "load_vae", "stream_prompts"]
