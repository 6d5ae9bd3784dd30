"""What V-Major selective communication costs in quality: the ablation the CoCoDiff paper lacks.

The trained toy pipeline generates held-out prompts with Ulysses on 2 ranks, once exactly and
once per threshold τ (``parallel.sequence.vmajor``), with guidance and the folder's UniPC
scheduler as ``ppdit generate`` runs it. For each τ: the share of V's rows and of all the
self-attention bytes saved, the pixel error against the exact videos, and the detector's
colour and direction accuracy (the toy's own measure of "the video shows the prompt").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ppdit.checkpoint.folder import WanFolder, load_folder
from ppdit.checkpoint.solver import folder_sampling
from ppdit.checkpoint.source import ModelSource
from ppdit.parallel.layout import Layout
from ppdit.parallel.runner import LayoutPlan, LayoutResult, run_layouts
from ppdit.sampler import Conditioning, Request
from ppdit.toy import FOLDER, data, detect, evaluate

THRESHOLDS = (0.0, 0.05, 0.1, 0.2, 0.4)
LATENT_SHAPE = (1, 8, 4, 8, 8)  # 13 frames of 32 x 32: what the toy was trained on


@dataclass(frozen=True)
class AblationRow:
    """One threshold's savings and costs (τ None: the exact run)."""

    threshold: float | None
    v_rows_sent: float  # share of V's rows sent to other ranks
    bytes_saved: float  # share of all self-attention all-to-all bytes saved
    max_pixel_error: float  # against the exact videos, pixels in [0, 1]
    mean_pixel_error: float
    colour_accuracy: float
    direction_accuracy: float


def ablation_plans(n: int, thresholds=THRESHOLDS, steps: int = evaluate.FULL_STEPS,
                   folder: str | Path = FOLDER, seed0: int = 1000
                   ) -> tuple[dict[str, LayoutPlan], list[data.ClipSpec], WanFolder]:
    """The exact plan and one per threshold, over ``n`` held-out prompts (one launch)."""
    toy = load_folder(folder)
    specs = data.held_out_specs(n)
    null = evaluate.embed(toy, "")
    prompts = tuple(Conditioning(evaluate.embed(toy, s.prompt), null) for s in specs)
    source = ModelSource(folder=str(folder))
    sampling = folder_sampling(source.scheduler(), steps, evaluate.GUIDANCE)
    base = LayoutPlan(Layout(ulysses=2), tuple(Request(i, seed0 + i) for i in range(n)),
                      sampling, source, LATENT_SHAPE, solver="folder", cfg="split", prompts=prompts)
    plans = {"exact": base, **{f"{t}": replace(base, v_major=t) for t in thresholds}}
    return plans, specs, toy


def run_ablation(n: int = 8, thresholds=THRESHOLDS, steps: int = evaluate.FULL_STEPS,
                 **launch_kwargs) -> list[AblationRow]:
    """Generate, decode and score every plan; one row per plan, the exact run first."""
    plans, specs, toy = ablation_plans(n, thresholds, steps)
    results = run_layouts(plans, **launch_kwargs)
    videos = {k: [evaluate.decode(toy.vae, r.latents[i]) for i in range(n)]  # (3, T, H, W)
              for k, r in results.items()}
    return [_row(t, results[k], videos[k], videos["exact"], specs, results["exact"].a2a_bytes)
            for t, k in [(None, "exact"), *((t, f"{t}") for t in thresholds)]]


def _row(t, res: LayoutResult, videos, exact, specs, exact_bytes: int) -> AblationRow:
    diffs = [((v - e).abs() / 2) for v, e in zip(videos, exact, strict=True)]  # [-1,1] -> [0,1]
    scores = detect.accuracy([detect.score(v, s) for v, s in zip(videos, specs, strict=True)])
    if res.vmajor is None:
        rows_sent, saved = 1.0, 0.0
    else:
        sent, total, bytes_sent, bytes_full = res.vmajor
        rows_sent, saved = sent / total, (bytes_full - bytes_sent) / exact_bytes
    return AblationRow(t, rows_sent, saved, max(float(d.max()) for d in diffs),
                       sum(float(d.mean()) for d in diffs) / len(diffs),
                       scores["colour_accuracy"], scores["direction_accuracy"])


def table(rows: list[AblationRow]) -> str:
    """The ablation as a text table (what the benchmark and the lesson print)."""
    out = [f"{'threshold':>10}{'V rows sent':>13}{'bytes saved':>13}{'max px err':>12}"
           f"{'mean px err':>13}{'colour':>8}{'direction':>11}"]
    for r in rows:
        name = "exact" if r.threshold is None else f"{r.threshold:g}"
        out.append(f"{name:>10}{r.v_rows_sent:>13.0%}{r.bytes_saved:>13.1%}"
                   f"{r.max_pixel_error:>12.4f}{r.mean_pixel_error:>13.5f}"
                   f"{r.colour_accuracy:>8.0%}{r.direction_accuracy:>11.0%}")
    return "\n".join(out)
