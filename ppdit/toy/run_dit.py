"""The stages after the VAE: latents, DiT, the folder, the loss plot, the evaluation."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import torch

from ppdit.toy import evaluate, models
from ppdit.toy.run import _bar
from ppdit.toy.train import (
    TrainConfig,
    encode_clips,
    latent_stats,
    save_folder,
    train_dit,
    write_json,
)
from ppdit.viz.toy import save_loss_plot


def stage_latents(vae, cfg: TrainConfig, work: Path):
    """The training latents and prompts (cached in ``work/latents.pt``)."""
    path = work / "latents.pt"
    if path.exists():
        saved = torch.load(path)
        return saved["latents"], saved["prompts"]
    latents, prompts = encode_clips(vae, cfg)
    torch.save({"latents": latents, "prompts": prompts}, path)
    return latents, prompts


def stage_dit(cfg: TrainConfig, vae, work: Path):
    """Normalise the latents with their statistics (stored in the VAE config), encode the
    prompts once with the frozen umT5, train the DiT; returns (dit, losses, tokenizer, umT5)."""
    latents, prompts = stage_latents(vae, cfg, work)
    mean, std = latent_stats(latents)
    vae.register_to_config(latents_mean=mean, latents_std=std)
    shape = (1, -1, 1, 1, 1)
    latents = (latents - torch.tensor(mean).view(shape)) / torch.tensor(std).view(shape)
    tokenizer, text_encoder = models.build_text(cfg.seed)
    vocab = sorted(set(prompts))
    embeds = models.encode_prompts(tokenizer, text_encoder, vocab)
    empty = models.encode_prompts(tokenizer, text_encoder, [""])[0]
    ids = torch.tensor([vocab.index(p) for p in prompts])
    with _bar(cfg.dit_steps, "DiT") as bar:
        def tick(loss):
            bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            bar.update(1)
        dit, losses = train_dit(latents, ids, embeds, empty, cfg, tick)
    return dit, losses, tokenizer, text_encoder


def finish(cfg: TrainConfig, args, vae, vae_losses: list[float], start: float) -> int:
    """DiT, folder, plot, eval.json; prints where everything went."""
    dit_start = time.perf_counter()
    dit, dit_losses, tokenizer, text_encoder = stage_dit(cfg, vae, args.work)
    dit_s = time.perf_counter() - dit_start
    vae_file = args.work / "vae_wall_s.json"  # the VAE stage may have run in an earlier call
    vae_s = float(vae_file.read_text()) if vae_file.exists() else dit_start - start
    train_s = vae_s + dit_s
    print(f"training done after {train_s:.0f} s", flush=True)
    out = args.out
    if out.exists():
        shutil.rmtree(out)
    save_folder(out, vae, dit, tokenizer, text_encoder)
    save_loss_plot(vae_losses, dit_losses, out / "loss.png")
    write_json(out / "train.json", {
        "config": asdict(cfg), "threads": args.threads, "train_wall_s": round(train_s, 1),
        "vae_wall_s": round(vae_s, 1), "dit_wall_s": round(dit_s, 1),
        "load_average_1min_at_end": os.getloadavg()[0], "cpu_count": os.cpu_count(),
        "final_vae_mse": _tail_mean(vae_losses), "final_dit_loss": _tail_mean(dit_losses),
    })
    write_json(out / "eval.json", run_eval(out, cfg.seed, args.eval_n))
    print(f"wrote {out} (training took {train_s:.0f} s)")
    return 0


def _tail_mean(losses: list[float], n: int = 20) -> float:
    tail = losses[-n:]
    return sum(tail) / max(1, len(tail))


def run_eval(folder: Path, seed: int, n: int = 20) -> dict:
    """The trained folder and the random-weight model of the same shape, both paths."""
    result = {"held_out": n, "detector": "ppdit.toy.detect", "paths": {
        "causal": f"demo streaming path, {evaluate.CAUSAL_STEPS} Euler steps per chunk",
        "full": f"WanPipeline, {evaluate.FULL_STEPS} UniPC steps, guidance 1",
        "full_cfg": f"WanPipeline, {evaluate.FULL_STEPS} UniPC steps, guidance "
                    f"{evaluate.GUIDANCE:g}, negative prompt ''"}}
    for name, toy in (("trained", evaluate.load(folder)), ("random", evaluate.random_like(seed))):
        for path in evaluate.PATHS:
            r = evaluate.evaluate(toy, path, n)
            result[f"{name}_{path}"] = r
            print(f"{name:8s} {path:6s}: colour {r['colour_accuracy']:.0%}, direction "
                  f"{r['direction_accuracy']:.0%}", flush=True)
    return result
