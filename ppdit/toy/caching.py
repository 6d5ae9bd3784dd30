"""What step caching costs in quality, beside what it saves: the trained toy pipeline on held-out
prompts, exactly and per First-Block-Cache threshold (``ppdit.cache``), on one rank, interleaved
round by round as ``ppdit generate`` runs it (guidance, the folder's UniPC). Per threshold: the
share of forwards skipped, the time over the exact run's (per-round ratios, ``teaching.verdict``),
the PSNR against the exact videos, and the detector's colour and direction accuracy."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from ppdit.cache import CacheConfig
from ppdit.parallel.runner import run_layouts
from ppdit.runtime.rounds import ratios
from ppdit.teaching.verdict import Verdict, change
from ppdit.toy import detect, evaluate
from ppdit.toy.vmajor import ablation_plans

THRESHOLDS = (0.05, 0.1, 0.2)
STEPS = 20  # more steps than the toy's 12: caching pays where neighbouring steps are alike


@dataclass(frozen=True)
class CachingRow:
    """One threshold's saving and cost (None: the exact run)."""

    threshold: float | None
    skipped: float  # share of forwards that ran only the first block
    time_ratios: tuple[float, ...]  # cached time / exact time, per round (below 1: faster)
    psnr_db: float  # over all prompts, against the exact videos (inf: identical)
    colour_accuracy: float
    direction_accuracy: float

    @property
    def speedup(self) -> Verdict | None:  # the ratios' median, interval and word
        return change(self.time_ratios) if self.time_ratios else None


def run_caching(n: int = 6, thresholds=THRESHOLDS, steps: int = STEPS, rounds: int = 3,
                **launch_kwargs) -> list[CachingRow]:
    """Generate, decode and score the exact plan and one per threshold, ``rounds`` rounds."""
    plans, specs, toy = ablation_plans(n, (), steps)
    exact = replace(plans["exact"], layout=replace(plans["exact"].layout, ulysses=1))
    plans = {"exact": exact, **{f"{t}": replace(exact, cache=CacheConfig(t))
                                for t in thresholds}}
    results = run_layouts(plans, rounds, **launch_kwargs)
    videos = {k: [evaluate.decode(toy.vae, r.latents[i]) for i in range(n)]
              for k, r in results.items()}
    rows = []
    for t, key in [(None, "exact"), *((t, f"{t}") for t in thresholds)]:
        res, log = results[key], results[key].cache_logs[0]
        speed = () if t is None else tuple(ratios(res.makespans_s,
                                                   results["exact"].makespans_s))
        scores = detect.accuracy([detect.score(v, s) for v, s in zip(videos[key], specs,
                                                                      strict=True)])
        rows.append(CachingRow(t, sum(not c for *_, c in log) / max(1, len(log)), speed,
                               _psnr(videos[key], videos["exact"]), scores["colour_accuracy"],
                               scores["direction_accuracy"]))
    return rows


def psnr_db(x: torch.Tensor, ref: torch.Tensor) -> float:
    """PSNR in dB of one tensor against ``ref``, the peak being ``ref``'s range (latents of
    random weights have no fixed range; inf: identical)."""
    mse = torch.mean((x.double() - ref.double()) ** 2).item()
    peak = (ref.max() - ref.min()).item()
    return math.inf if mse == 0 else 10 * math.log10(peak ** 2 / mse)


def _psnr(videos, exact) -> float:
    """PSNR in dB of videos in [-1, 1] against the exact ones, the squared error pooled (a mean
    of per-video PSNRs is infinite as soon as one video is untouched)."""
    mse = sum(float(((v - e) / 2).pow(2).mean()) for v, e in zip(videos, exact, strict=True))
    return math.inf if mse == 0 else 10 * math.log10(len(videos) / mse)


QUALITY = f"{'PSNR dB':>8}{'colour':>8}{'direction':>11}"


def quality(row) -> str:
    """A row's PSNR and detector accuracies, as the ablation tables print them."""
    speed = "-" if row.speedup is None else row.speedup.describe()
    return (f"{speed:<44}{row.psnr_db:>8.1f}{row.colour_accuracy:>8.0%}"
            f"{row.direction_accuracy:>11.0%}")


def table(rows: list[CachingRow]) -> str:
    """The ablation as a text table (what the benchmark and the lesson print)."""
    out = [f"{'threshold':>10}{'skipped':>9}  {'time / exact (median, 90% interval)':<44}"
           + QUALITY]
    for r in rows:
        name = "exact" if r.threshold is None else f"{r.threshold:g}"
        out.append(f"{name:>10}{r.skipped:>9.0%}  {quality(r)}")
    return "\n".join(out)


