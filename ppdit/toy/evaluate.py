"""Generate toy clips from a pipeline folder and score them with the detector.

Two generation paths, the two ways ppdit runs the model:

* ``causal``: the demo's streaming path (``ppdit.serve.causal.ChunkGenerator``): chunks of two
  latent frames, each denoised with ppdit's Euler sampler while attending to the KV cache of
  the clean chunks before it;
* ``full``: the whole clip at once with full attention and the folder's UniPC scheduler,
  through diffusers' own ``WanPipeline`` (what ``ppdit generate`` must equal at every layout);
  ``full_cfg`` is the same with classifier-free guidance (``GUIDANCE``, ``ppdit generate``'s
  default), which the DiT learned from its 10% of empty prompts.
"""

from __future__ import annotations

from dataclasses import asdict

import torch

from ppdit.checkpoint.folder import WanFolder
from ppdit.toy import data, detect, models
from ppdit.viz.artifacts import pipeline_clip

CAUSAL_STEPS = 8  # Euler steps per chunk in the demo's path
FULL_STEPS = 12  # UniPC steps for the whole clip
CHUNKS = 2  # chunks of CHUNK_FRAMES latent frames: 4 latent frames = 13 pixel frames
GUIDANCE = 5.0  # the "full_cfg" path: WanPipeline's default guidance, negative prompt ""
PATHS = ("causal", "full", "full_cfg")


def random_like(seed: int = 0) -> WanFolder:
    """The same shapes with untrained weights (the chance baseline)."""
    from ppdit.checkpoint.tiny import tiny_unipc_scheduler

    tokenizer, text_encoder = models.build_text(seed)
    vae = models.build_vae(seed).eval()
    return WanFolder(None, models.build_dit(seed).eval(), vae, text_encoder, tokenizer,
                     tiny_unipc_scheduler())


def embed(toy: WanFolder, prompt: str) -> torch.Tensor:
    """(1, L, D) prompt embeddings at the trained length."""
    return models.encode_prompts(toy.tokenizer, toy.text_encoder, [prompt])


@torch.no_grad()
def decode(vae, latents: torch.Tensor) -> torch.Tensor:
    """DiT latents (1, C, F, H, W) -> pixels (3, T, H, W) in [-1, 1] (the detector's range;
    ``vae.decode.decode`` post-processes the same pixels to [0, 1] as ``WanPipeline`` does)."""
    from ppdit.vae.decode import denormalize

    return vae.decode(denormalize(latents, vae.config), return_dict=False)[0][0].clamp(-1, 1)


@torch.no_grad()
def generate_causal(toy: WanFolder, prompt: str, seed: int, steps: int = CAUSAL_STEPS,
                    chunks: int = CHUNKS) -> torch.Tensor:
    """The demo's path: causal chunks with the KV cache; pixels (3, T, H, W)."""
    from ppdit.attention import use_diffusers_attention
    from ppdit.sampler import SamplingConfig
    from ppdit.serve.causal import ChunkGenerator, StreamConfig

    cfg = StreamConfig(chunk_frames=models.CHUNK_FRAMES, height=8, width=8,
                       channels=models.Z_DIM, sampling=SamplingConfig(num_steps=steps))
    gen = ChunkGenerator(toy.transformer, cfg)
    text = embed(toy, prompt)
    latents = torch.cat([gen.generate(k, seed, text) for k in range(chunks)], dim=2)
    use_diffusers_attention(toy.transformer)
    return decode(toy.vae, latents)


@torch.no_grad()
def generate_full(toy: WanFolder, prompt: str, seed: int, steps: int = FULL_STEPS,
                  guidance_scale: float = 1.0, frames: int = data.FRAMES) -> torch.Tensor:
    """diffusers' ``WanPipeline`` on the whole clip; pixels (3, T, H, W) in [-1, 1]."""
    from diffusers import WanPipeline

    pipe = WanPipeline(tokenizer=toy.tokenizer, text_encoder=toy.text_encoder,
                       transformer=toy.transformer, vae=toy.vae, scheduler=toy.scheduler)
    pipe.set_progress_bar_config(disable=True)
    video = pipe(prompt, negative_prompt="", height=data.SIZE, width=data.SIZE,
                 num_frames=frames, num_inference_steps=steps, guidance_scale=guidance_scale,
                 generator=torch.Generator().manual_seed(seed), output_type="pt",
                 max_sequence_length=models.MAX_SEQUENCE_LENGTH).frames
    return pipeline_clip(video)


def evaluate(toy: WanFolder, path: str = "causal", n: int = 20, seed0: int = 1000,
             **kwargs) -> dict:
    """Scores of ``n`` held-out prompt/seed pairs: accuracies and each clip's verdict."""
    if path not in PATHS:
        raise ValueError(f"path={path!r} is not one of {PATHS}")
    run = generate_causal if path == "causal" else generate_full
    if path == "full_cfg":
        kwargs = {"guidance_scale": GUIDANCE, **kwargs}
    scores = [detect.score(run(toy, spec.prompt, seed0 + i, **kwargs), spec)
              for i, spec in enumerate(data.held_out_specs(n))]
    return {**detect.accuracy(scores), "clips": [asdict(s) for s in scores]}
