"""``scripts/train_toy.py``'s stages: each writes its result under ``--work`` and a rerun skips
the stages already done (so a long run can be resumed after an interruption)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ppdit.toy.train import TrainConfig


def _bar(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="step", mininterval=2.0)


def stage_vae(cfg: TrainConfig, work: Path):
    """Train the VAE (or load it from ``work/vae``); returns (vae, losses)."""
    from diffusers import AutoencoderKLWan

    from ppdit.toy.train import train_vae

    if (work / "vae" / "config.json").exists():
        losses = json.loads((work / "vae_losses.json").read_text())
        return AutoencoderKLWan.from_pretrained(work / "vae").eval(), losses
    with _bar(cfg.vae_steps, "VAE") as bar:
        def tick(mse):
            bar.set_postfix(mse=f"{mse:.4f}", refresh=False)
            bar.update(1)
        vae, losses = train_vae(cfg, tick)
    vae.save_pretrained(work / "vae")
    (work / "vae_losses.json").write_text(json.dumps(losses))
    return vae, losses


def main(args) -> int:
    """Run the stages up to ``--stop-after``; prints the wall time of each."""
    torch.set_num_threads(args.threads)
    cfg = TrainConfig(seed=args.seed)
    if args.vae_steps:
        cfg = replace(cfg, vae_steps=args.vae_steps)
    if args.dit_steps:
        cfg = replace(cfg, dit_steps=args.dit_steps)
    if args.dit_clips:
        cfg = replace(cfg, dit_clips=args.dit_clips)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    (work / "config.json").write_text(json.dumps(asdict(cfg), indent=2))
    start = time.perf_counter()
    vae, vae_losses = stage_vae(cfg, work)
    print(f"VAE stage done after {time.perf_counter() - start:.0f} s", flush=True)
    if args.stop_after == "vae":
        return 0
    from ppdit.toy.run_dit import finish

    return finish(cfg, args, vae, vae_losses, start)
