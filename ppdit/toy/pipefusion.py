"""What PipeFusion's displaced patches cost in quality and buy in time: the trained toy pipeline
on held-out prompts (guided, its UniPC), layer split flushing every step (exact: the reference)
beside ``pipefusion=2`` per (warm-up steps W, patches M), in one launch, interleaved round by
round. Per setting: the PSNR of the decoded videos against layer split's, the detector's colour
and direction accuracy, and the time over layer split's (per-round ratios)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ppdit.parallel.layer_split.run import run_layer_splits
from ppdit.parallel.layout import Layout
from ppdit.parallel.runner import loop_plan
from ppdit.runtime.rounds import ratios
from ppdit.teaching.verdict import Verdict, change
from ppdit.toy import detect, evaluate
from ppdit.toy.caching import QUALITY, _psnr, quality
from ppdit.toy.vmajor import ablation_plans

SETTINGS = ((0, 2), (1, 2), (2, 2), (4, 2), (0, 4), (1, 4), (2, 4), (4, 4))  # (W, M)
DEFAULT = (1, 4)  # ppdit's LayoutPlan defaults: warmup_steps=1, patches=4


@dataclass(frozen=True)
class PipeFusionRow:
    """One setting's cost and saving (``warmup`` None: layer split, the reference)."""

    warmup: int | None
    patches: int
    time_ratios: tuple[float, ...]  # its time / layer split's, per round (below 1: faster)
    psnr_db: float  # against layer split's videos (inf: identical)
    colour_accuracy: float
    direction_accuracy: float

    @property
    def speedup(self) -> Verdict | None:
        return change(self.time_ratios) if self.time_ratios else None


def run_pipefusion(n: int = 6, settings=SETTINGS, rounds: int = 1,
                   **launch_kwargs) -> list[PipeFusionRow]:
    """Generate, decode and score layer split and every setting on 2 ranks."""
    plans, specs, toy = ablation_plans(n, ())
    exact = replace(plans["exact"], layout=Layout(layer=2))
    loops = {"layer=2": replace(loop_plan(exact), wrap=False),
             **{f"{w},{m}": loop_plan(replace(exact, layout=Layout(pipefusion=2), patches=m,
                                              warmup_steps=w)) for w, m in settings}}
    results = run_layer_splits(loops, rounds, **launch_kwargs)
    videos = {k: [evaluate.decode(toy.vae, r.latents[i]) for i in range(n)]
              for k, r in results.items()}
    rows = []
    for key, (w, m) in [("layer=2", (None, 1)), *((f"{w},{m}", (w, m)) for w, m in settings)]:
        scores = detect.accuracy([detect.score(v, s) for v, s in zip(videos[key], specs,
                                                                      strict=True)])
        speed = () if w is None else tuple(ratios(results[key].makespans_s,
                                                   results["layer=2"].makespans_s))
        rows.append(PipeFusionRow(w, m, speed, _psnr(videos[key], videos["layer=2"]),
                                  scores["colour_accuracy"], scores["direction_accuracy"]))
    return rows


def table(rows: list[PipeFusionRow]) -> str:
    """The ablation as a text table (what the benchmark and the lesson print)."""
    out = [f"{'setting':>16}  {'time / layer split (median, 90% interval)':<44}" + QUALITY]
    for r in rows:
        name = "layer=2 (exact)" if r.warmup is None else f"W={r.warmup}, M={r.patches}"
        out.append(f"{name:>16}  {quality(r)}")
    return "\n".join(out)
