"""The stages after the VAE: latents, DiT, the folder, the loss plot, the evaluation."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import torch

from ppdit.checkpoint.folder import load_folder
from ppdit.checkpoint.tiny import save_pipeline
from ppdit.toy import evaluate, models, train
from ppdit.toy.train import DitData, TrainConfig, with_bar, write_json
from ppdit.viz.toy import save_loss_plot


def stage_latents(vae, cfg: TrainConfig, work: Path):
    """The training latents and prompts (cached in ``work/latents.pt``)."""
    path = work / "latents.pt"
    if path.exists():
        saved = torch.load(path)
        return saved["latents"], saved["prompts"]
    latents, prompts = train.encode_clips(vae, cfg)
    torch.save({"latents": latents, "prompts": prompts}, path)
    return latents, prompts


def dit_data(cfg: TrainConfig, vae, work: Path | None, tokenizer=None, text_encoder=None):
    """The DiT's training data: the VAE's latents normalised with their statistics (stored in
    the VAE config; a trained folder's VAE keeps its own), the prompts encoded once with the
    frozen umT5. Returns (DitData, tokenizer, umT5)."""
    if work is None:  # a trained folder: its VAE already holds the statistics
        latents, prompts = train.encode_clips(vae, cfg)
        mean, std = vae.config.latents_mean, vae.config.latents_std
    else:
        latents, prompts = stage_latents(vae, cfg, work)
        mean, std = train.latent_stats(latents)
        vae.register_to_config(latents_mean=mean, latents_std=std)
    shape = (1, -1, 1, 1, 1)
    latents = (latents - torch.tensor(mean).view(shape)) / torch.tensor(std).view(shape)
    if tokenizer is None:
        tokenizer, text_encoder = models.build_text(cfg.seed)
    vocab = sorted(set(prompts))
    embeds = models.encode_prompts(tokenizer, text_encoder, vocab)
    empty = models.encode_prompts(tokenizer, text_encoder, [""])[0]
    ids = torch.tensor([vocab.index(p) for p in prompts])
    return DitData(latents, ids, embeds, empty), tokenizer, text_encoder


def stage_dit(cfg: TrainConfig, data: DitData):
    """Train the DiT, then fine-tune it for the first frame: (dit, losses of both, tune s)."""
    dit, losses = with_bar(cfg.dit_steps, "DiT", lambda tick: train.train_dit(data, cfg, tick))
    start = time.perf_counter()
    dit, tuned = with_bar(cfg.tune_steps, "DiT first-frame tune",
                          lambda tick: train.tune_dit(dit, data, cfg, tick))
    return dit, losses + tuned, time.perf_counter() - start


def finish(cfg: TrainConfig, args, vae, vae_losses: list[float], start: float) -> int:
    """DiT, folder, plot, eval.json; prints where everything went."""
    dit_start = time.perf_counter()
    data, tokenizer, text_encoder = dit_data(cfg, vae, args.work)
    dit, dit_losses, tune_s = stage_dit(cfg, data)
    dit_s = time.perf_counter() - dit_start
    vae_file = args.work / "vae_wall_s.json"  # the VAE stage may have run in an earlier call
    vae_s = float(vae_file.read_text()) if vae_file.exists() else dit_start - start
    train_s = vae_s + dit_s
    print(f"training done after {train_s:.0f} s", flush=True)
    out = args.out
    if out.exists():
        shutil.rmtree(out)
    save_pipeline(out, tokenizer=tokenizer, text_encoder=text_encoder, transformer=dit, vae=vae)
    save_loss_plot(vae_losses, dit_losses, out / "loss.png")
    write_json(out / "train.json", {
        "config": asdict(cfg), "threads": args.threads, "train_wall_s": round(train_s, 1),
        "vae_wall_s": round(vae_s, 1), "dit_wall_s": round(dit_s, 1),
        "tune_wall_s": round(tune_s, 1),
        "load_average_1min_at_end": os.getloadavg()[0], "cpu_count": os.cpu_count(),
        "final_vae_mse": _tail_mean(vae_losses), "final_dit_loss": _tail_mean(dit_losses),
    })
    write_json(out / "eval.json", run_eval(out, cfg.seed, args.eval_n))
    print(f"wrote {out} (training took {train_s:.0f} s)")
    return 0


def tune_folder(cfg: TrainConfig, args) -> int:
    """``--tune-from FOLDER``: only the first-frame fine-tune, on a trained folder's DiT with
    its own VAE and text encoder (the same clips, re-encoded); writes the source's files to
    ``--out`` with the new transformer, train.json extended with the tune, a new eval.json."""
    src = Path(args.tune_from)
    toy = load_folder(src)
    record = json.loads((src / "train.json").read_text())
    start = time.perf_counter()
    data, _, _ = dit_data(cfg, toy.vae, None, toy.tokenizer, toy.text_encoder)
    dit, losses = with_bar(cfg.tune_steps, "DiT first-frame tune",
                           lambda tick: train.tune_dit(toy.transformer, data, cfg, tick))
    tune_s = time.perf_counter() - start
    if args.out.resolve() != src.resolve():  # everything but the DiT is the source's, as is
        shutil.rmtree(args.out, ignore_errors=True)
        shutil.copytree(src, args.out)
    shutil.rmtree(args.out / "transformer")
    dit.save_pretrained(args.out / "transformer")
    fields = ("tune_steps", "tune_lr", "first_frame_weight")
    record["config"].update({k: getattr(cfg, k) for k in fields})
    record.update(tune_wall_s=round(tune_s, 1), final_tune_loss=_tail_mean(losses),
                  tune_threads=args.threads, tune_load_average_1min_at_end=os.getloadavg()[0])
    write_json(args.out / "train.json", record)
    write_json(args.out / "eval.json", run_eval(args.out, cfg.seed, args.eval_n))
    print(f"wrote {args.out} (the tune took {tune_s:.0f} s)")
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
    for name, toy in (("trained", load_folder(folder)), ("random", evaluate.random_like(seed))):
        for path in evaluate.PATHS:
            r = evaluate.evaluate(toy, path, n)
            result[f"{name}_{path}"] = r
            print(f"{name:8s} {path:6s}: colour {r['colour_accuracy']:.0%}, direction "
                  f"{r['direction_accuracy']:.0%}", flush=True)
    return result
