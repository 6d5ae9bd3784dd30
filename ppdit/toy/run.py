"""``scripts/train_toy.py``'s stages: each writes its result under ``--work`` and a rerun skips
the stages already done (so a long run can be resumed after an interruption)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ppdit.toy.progress import bar
from ppdit.toy.train import TrainConfig


def stage_vae(cfg: TrainConfig, work: Path):
    """Train the VAE in its two phases (or load them from ``work``); returns (vae, losses)."""
    vae, losses = _vae_phase(cfg, work, "vae", None)
    vae, more = _vae_phase(cfg, work, "vae_long", vae)
    return vae, losses + more


def _vae_phase(cfg: TrainConfig, work: Path, name: str, vae):
    from diffusers import AutoencoderKLWan

    from ppdit.toy.train import train_vae

    if (work / name / "config.json").exists():
        losses = json.loads((work / f"{name}_losses.json").read_text())
        return AutoencoderKLWan.from_pretrained(work / name).eval(), losses
    start = time.perf_counter()
    long = vae is not None
    with bar(cfg.vae_long_steps if long else cfg.vae_steps, name) as progress:
        def tick(mse):
            progress.set_postfix(mse=f"{mse:.4f}", refresh=False)
            progress.update(1)
        vae, losses = train_vae(cfg, tick, vae, long)
    vae.save_pretrained(work / name)
    wall = work / "vae_wall_s.json"
    total = (float(wall.read_text()) if wall.exists() else 0.0) + time.perf_counter() - start
    wall.write_text(json.dumps(total))
    (work / f"{name}_losses.json").write_text(json.dumps(losses))
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
    torch.set_num_threads(args.threads)
    cfg = _overrides(TrainConfig(seed=args.seed), args.set)
    if getattr(args, "tune_from", None):
        from ppdit.toy.run_dit import tune_folder

        return tune_folder(cfg, args)
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
