"""Training the toy pipeline: the VAE (reconstruction), then the DiT (flow matching on the VAE's
latents, conditioned on the frozen random umT5), then the pipeline folder.

Everything is drawn from one seed (data, initial weights, noise, timesteps), so a run is
reproducible on the same machine and thread count (CPU reductions may round differently with
another thread count). ``scripts/train_toy.py`` is the command line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ppdit.toy import data, models


@dataclass(frozen=True)
class TrainConfig:
    """Sizes and budgets of one training run (the defaults are what models/toy_shapes used)."""

    seed: int = 0
    vae_steps: int = 1000
    vae_batch: int = 8
    vae_frames: int = 5  # 1 + 4: the first (image) frame and one 4-frame group
    # then longer clips, so the causal caches between 4-frame groups are trained too
    vae_long_steps: int = 250
    vae_long_frames: int = 13  # the whole clip: 1 + 4 x 3
    vae_lr: float = 3e-3
    kl_weight: float = 1e-4
    fg_weight: float = 10.0  # extra reconstruction weight on the shape's pixels (~5% of them)
    dit_clips: int = 1024  # training clips encoded once to latents
    dit_steps: int = 4000
    dit_batch: int = 16
    dit_lr: float = 2e-3
    p_causal: float = 0.5  # share of batches trained block-causally (teacher forcing)
    p_uncond: float = 0.1  # share of prompts replaced by "" (for classifier-free guidance)
    shift: float = 3.0  # timestep shift, as the sampler's
    # Then a fine-tune that weights the first latent frame's loss: that frame is the clip's
    # first picture alone (the causal VAE encodes frame 0 by itself), decided from the text
    # with no earlier frame to follow, and the plain loss left it the wrong colour in about a
    # fifth of the clips (the demo's first video opened on a blue square for "a red ball").
    tune_steps: int = 2000
    tune_lr: float = 5e-4
    first_frame_weight: float = 10.0  # loss weight of latent frame 0 (the others: 1)


def lr_at(step: int, total: int, peak: float, warmup: int = 50) -> float:
    """Linear warm-up, then cosine decay to zero."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def _step(opt: torch.optim.Optimizer, model, loss: torch.Tensor, lr: float) -> None:
    """One AdamW step at ``lr``, the gradient norm clipped to 1."""
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def with_bar(total: int, desc: str, fit: Callable, name: str = "loss"):
    """``fit(tick)`` under a tqdm bar of ``total`` steps (redrawn at most every 2 s); each
    ``tick(x)`` advances it, showing ``x`` as ``name``."""
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit="step", mininterval=2.0) as bar:
        def tick(x: float) -> None:
            bar.set_postfix({name: f"{x:.4f}"}, refresh=False)
            bar.update(1)
        return fit(tick)


def vae_loss(vae, clips: torch.Tensor, cfg: TrainConfig, g: torch.Generator
             ) -> tuple[torch.Tensor, float]:
    """Foreground-weighted MSE of the reconstruction + a small KL; returns (loss, plain MSE)."""
    post = vae.encode(clips).latent_dist
    z = post.mean + post.std * torch.randn(post.mean.shape, generator=g)
    rec = vae.decode(z).sample
    bg = torch.tensor(data.BACKGROUND).view(1, 3, 1, 1, 1) * 2 - 1
    weight = 1 + cfg.fg_weight * ((clips - bg).abs().amax(dim=1, keepdim=True) > 0.05)
    mse = (rec - clips) ** 2
    kl = 0.5 * (post.mean**2 + post.var - 1 - post.logvar).mean()
    return (weight * mse).mean() + cfg.kl_weight * kl, float(mse.detach().mean())


def train_vae(cfg: TrainConfig, progress: Callable | None = None, vae=None, long: bool = False):
    """The toy VAE trained on fresh clips; (vae, losses). Phase 1 (``long=False``): a new VAE,
    ``cfg.vae_steps`` steps of ``cfg.vae_frames`` frames. Phase 2 (``long=True``): ``vae``
    fine-tuned ``cfg.vae_long_steps`` steps on ``cfg.vae_long_frames`` frames, at a third of
    the learning rate: a VAE that only ever saw 5 frames decodes later 4-frame groups badly
    (their causal caches hold states it never trained on)."""
    steps, frames = ((cfg.vae_long_steps, cfg.vae_long_frames) if long
                     else (cfg.vae_steps, cfg.vae_frames))
    peak = cfg.vae_lr / 3 if long else cfg.vae_lr
    vae = (vae if long else models.build_vae(cfg.seed)).train().requires_grad_(True)
    opt = torch.optim.AdamW(vae.parameters(), lr=peak, weight_decay=0.0)
    g = torch.Generator().manual_seed(cfg.seed + 1 + 10 * long)
    losses = []
    for step in range(steps):
        specs = data.make_specs(cfg.seed * 1_000_003 + step + 500_000 * long, cfg.vae_batch)
        clips = data.make_clips(specs, frames=frames)
        loss, mse = vae_loss(vae, clips, cfg, g)
        _step(opt, vae, loss, lr_at(step, steps, peak, warmup=10 if long else 50))
        losses.append(mse)
        if progress:
            progress(mse)
    return vae.eval().requires_grad_(False), losses


@torch.no_grad()
def encode_clips(vae, cfg: TrainConfig, batch: int = 32) -> tuple[torch.Tensor, list[str]]:
    """The DiT's training set: ``cfg.dit_clips`` fresh clips through the trained VAE's encoder
    (posterior mean), (N, C, F, H, W), with their prompts."""
    specs = data.make_specs(cfg.seed * 1_000_003 + 999_983, cfg.dit_clips)
    chunks = [vae.encode(data.make_clips(specs[i:i + batch])).latent_dist.mean
              for i in range(0, len(specs), batch)]
    return torch.cat(chunks), [s.prompt for s in specs]


def latent_stats(latents: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per-channel mean and std: the VAE config's ``latents_mean`` / ``latents_std``, with which
    the pipeline maps DiT latents (about unit variance) back to VAE latents."""
    mean = latents.mean(dim=(0, 2, 3, 4))
    std = latents.std(dim=(0, 2, 3, 4)).clamp(min=1e-3)
    return mean.tolist(), std.tolist()


def shifted_sigmas(shape: tuple[int, ...], shift: float, g: torch.Generator) -> torch.Tensor:
    """Training noise levels: uniform, then shifted like the sampler's schedule."""
    u = torch.rand(shape, generator=g)
    return shift * u / (1 + (shift - 1) * u)


@dataclass
class DitBatch:
    """One training batch: model inputs and the velocity target."""

    latent: torch.Tensor
    timestep: torch.Tensor
    text: torch.Tensor
    target: torch.Tensor
    causal: bool


def make_batch(x0: torch.Tensor, text: torch.Tensor, cfg: TrainConfig, g: torch.Generator
               ) -> DitBatch:
    """Noise a batch of clean latents, block-causally (teacher forcing) or as whole clips."""
    b, _, f, h, w = x0.shape
    per_frame = (h // 2) * (w // 2)
    eps = torch.randn(x0.shape, generator=g)
    if float(torch.rand((), generator=g)) < cfg.p_causal:
        sig = shifted_sigmas((b, f // models.CHUNK_FRAMES), cfg.shift, g)
        sig = sig.repeat_interleave(models.CHUNK_FRAMES, dim=1)  # (B, F)
        s = sig.view(b, 1, f, 1, 1)
        xt = (1 - s) * x0 + s * eps
        t = torch.cat([torch.zeros(b, f * per_frame),
                       (sig * 1000).repeat_interleave(per_frame, dim=1)], dim=1)
        return DitBatch(torch.cat([x0, xt], dim=2), t, text, eps - x0, True)
    frames = int(torch.randint(1, f // models.CHUNK_FRAMES + 1, (), generator=g))
    frames *= models.CHUNK_FRAMES  # whole clips of 2, 4 or 6 latent frames (the VAE is causal)
    x0, eps = x0[:, :, :frames], eps[:, :, :frames]
    sig = shifted_sigmas((b,), cfg.shift, g)
    s = sig.view(b, 1, 1, 1, 1)
    return DitBatch((1 - s) * x0 + s * eps, sig * 1000, text, eps - x0, False)


def dit_loss(model, state: models.TrainAttnProcessor, batch: DitBatch,
             first_frame_weight: float = 1.0) -> torch.Tensor:
    """MSE of the predicted velocity (on the noisy half only, for teacher forcing), averaged
    over latent frames with weight ``first_frame_weight`` on frame 0 (1 on the others)."""
    if batch.causal:
        shape = (1, *batch.target.shape[1:])  # (1, C, F, H, W)
        cos, sin = model.rope(torch.empty(shape, device="meta"))
        state.rope = (torch.cat([cos, cos], dim=1), torch.cat([sin, sin], dim=1))
        state.mask = models.teacher_forcing_mask(shape[2], (shape[3] // 2) * (shape[4] // 2))
    else:
        state.rope = state.mask = None
    out = model(batch.latent, batch.timestep, batch.text, return_dict=False)[0]
    if batch.causal:
        out = out[:, :, batch.target.shape[2]:]
    per_frame_mse = ((out.float() - batch.target) ** 2).mean(dim=(0, 1, 3, 4))  # (F,)
    if first_frame_weight == 1.0:
        return per_frame_mse.mean()
    weights = torch.ones_like(per_frame_mse)
    weights[0] = first_frame_weight
    return (per_frame_mse * weights).sum() / weights.sum()


@dataclass(frozen=True)
class DitData:
    """What the DiT trains on: normalised latents, each clip's prompt id, the prompts'
    embeddings and the empty prompt's."""

    latents: torch.Tensor
    prompt_ids: torch.Tensor
    embeds: torch.Tensor
    empty: torch.Tensor


def _fit(model, data: DitData, cfg: TrainConfig, *, steps: int, peak: float, warmup: int,
         first_frame_weight: float, seed: int, progress: Callable | None):
    """The DiT's training loop (prompts dropped to "" with p_uncond); returns (model with its
    default attention, losses)."""
    model = model.train()
    state = models.install_train_attention(model)
    opt = torch.optim.AdamW(model.parameters(), lr=peak, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    losses = []
    for step in range(steps):
        idx = torch.randint(len(data.latents), (cfg.dit_batch,), generator=g)
        text = data.embeds[data.prompt_ids[idx]].clone()
        text[torch.rand(cfg.dit_batch, generator=g) < cfg.p_uncond] = data.empty
        batch = make_batch(data.latents[idx], text, cfg, g)
        loss = dit_loss(model, state, batch, first_frame_weight)
        _step(opt, model, loss, lr_at(step, steps, peak, warmup))
        losses.append(float(loss.detach()))
        if progress:
            progress(losses[-1])
    clean = models.build_dit(cfg.seed)  # default attention processors, trained weights
    clean.load_state_dict(model.state_dict())
    return clean.eval().requires_grad_(False), losses


def train_dit(data: DitData, cfg: TrainConfig, progress: Callable | None = None):
    """Flow matching on normalised latents from a fresh DiT: (model, losses)."""
    return _fit(models.build_dit(cfg.seed), data, cfg, steps=cfg.dit_steps, peak=cfg.dit_lr,
                warmup=50, first_frame_weight=1.0, seed=cfg.seed + 2, progress=progress)


def tune_dit(dit, data: DitData, cfg: TrainConfig, progress: Callable | None = None):
    """The first-frame fine-tune of a trained DiT (``cfg.tune_*``): (model, losses)."""
    model = models.build_dit(cfg.seed)
    model.load_state_dict(dit.state_dict())
    return _fit(model, data, cfg, steps=cfg.tune_steps, peak=cfg.tune_lr, warmup=20,
                first_frame_weight=cfg.first_frame_weight, seed=cfg.seed + 3, progress=progress)


def write_json(path: Path, obj) -> None:
    """Pretty JSON (eval.json, train.json)."""
    path.write_text(json.dumps(obj, indent=2) + "\n")
