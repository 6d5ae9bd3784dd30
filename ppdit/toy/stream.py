"""The toy pipeline as the streaming system's model: a ``BringupConfig`` with the trained folder,
its prompts and its latent geometry (the demo's default, lessons 12-15 where they show video)."""

from __future__ import annotations

from dataclasses import replace

from ppdit.checkpoint.source import ModelSource
from ppdit.serve.config import BringupConfig
from ppdit.toy import FOLDER, evaluate, models
from ppdit.toy.data import SIZE


def stream_config(cfg: BringupConfig, prompts: tuple[str, str], num_steps: int | None = None
                  ) -> BringupConfig:
    """``cfg`` with ``models/toy_shapes``, ``prompts`` (before / after the cut) and the toy's
    latents (8 x 8, 8 channels, chunks of 2 latent frames: what it was trained on)."""
    if not (FOLDER / "model_index.json").exists():
        raise FileNotFoundError(f"{FOLDER} is missing: it is committed with the repository "
                                "(or rebuild it: scripts/train_toy.py); --model random runs "
                                "the random-weight preset instead")
    side = SIZE // models.VAE.spatial_factor
    source = ModelSource(folder=str(FOLDER), dtype=cfg.source.dtype)
    return replace(cfg, source=source, prompts=tuple(prompts), latent_hw=(side, side),
                   channels=models.Z_DIM, chunk_frames=models.CHUNK_FRAMES,
                   num_steps=num_steps or evaluate.CAUSAL_STEPS)
