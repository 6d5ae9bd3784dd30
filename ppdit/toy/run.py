"""``scripts/train_toy.py``'s stages: each writes its result under ``--work`` and a rerun skips
the stages already done (so a long run can be resumed after an interruption). The VAE's stages
are here, the DiT's and the folder's in ``run_dit``."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path

import torch

from ppdit.toy.train import TrainConfig, train_vae, with_bar


def stage_vae(cfg: TrainConfig, work: Path):
    """Train the VAE in its two phases (or load each from ``work``); returns (vae, losses)."""
    from diffusers import AutoencoderKLWan

    vae, losses = None, []
    for name, long in (("vae", False), ("vae_long", True)):
        if (work / name / "config.json").exists():
            vae = AutoencoderKLWan.from_pretrained(work / name).eval()
            losses += json.loads((work / f"{name}_losses.json").read_text())
            continue
        start = time.perf_counter()
        vae, phase = with_bar(cfg.vae_long_steps if long else cfg.vae_steps, name,
                              partial(train_vae, cfg, vae=vae, long=long), "mse")
        vae.save_pretrained(work / name)
        wall = work / "vae_wall_s.json"
        total = (float(wall.read_text()) if wall.exists() else 0.0) + time.perf_counter() - start
        wall.write_text(json.dumps(total))
        (work / f"{name}_losses.json").write_text(json.dumps(phase))
        losses += phase
    return vae, losses


def _overrides(cfg: TrainConfig, pairs: list[str]) -> TrainConfig:
    """``FIELD=VALUE`` strings applied to ``cfg`` (the value cast to the field's type)."""
    for pair in pairs:
        field, _, value = pair.partition("=")
        if not hasattr(cfg, field) or not value:
            raise ValueError(f"--set {pair!r}: expected FIELD=VALUE with FIELD one of "
                             f"{sorted(asdict(cfg))}")
        cfg = replace(cfg, **{field: type(getattr(cfg, field))(value)})
    return cfg


def main(args) -> int:
    """Run the stages up to ``--stop-after``; prints the wall time of each."""
    from ppdit.toy import run_dit

    torch.set_num_threads(args.threads)
    cfg = _overrides(TrainConfig(seed=args.seed), args.set)
    if getattr(args, "tune_from", None):
        return run_dit.tune_folder(cfg, args)
    args.work.mkdir(parents=True, exist_ok=True)
    (args.work / "config.json").write_text(json.dumps(asdict(cfg), indent=2))
    start = time.perf_counter()
    vae, vae_losses = stage_vae(cfg, args.work)
    print(f"VAE stage done after {time.perf_counter() - start:.0f} s", flush=True)
    if args.stop_after == "vae":
        return 0
    return run_dit.finish(cfg, args, vae, vae_losses, start)
