"""PipeFusion: displaced patches against layer split flushing every step, on the same work, and
what the patches cost in quality on the trained toy.

    python benchmarks/pipefusion.py            # ~1.5 min on 2 cores
    python benchmarks/pipefusion.py --quick    # ~1 min

Speed: one unguided request of the small preset at 2,048 tokens, 4 steps, on 2 ranks (one
thread each): ``layer=2`` flushing every step (one micro-batch: half the ranks idle) beside
``pipefusion=2`` with M = 4 patches after W = 1 warm-up step, interleaved round by round.
Target: PipeFusion >= 1.1x layer split's throughput, per round (``record.py``'s rule); the
ideal is (P x 1) / (W P + (N - W)(M + P - 1)/M) per step over N steps.
Quality: ``ppdit.toy.pipefusion``'s table (PSNR against layer split, detector accuracy) over
W in {0, 1, 2, 4} and M in {2, 4}; the default (W=1, M=4) must keep the detector >= 90%.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from record import Target, keep, show

from ppdit.analysis.bubbles import pipefusion_bubble
from ppdit.checkpoint.source import ModelSource
from ppdit.parallel.layer_split.run import run_layer_splits
from ppdit.parallel.layout import Layout
from ppdit.parallel.runner import LayoutPlan, loop_plan
from ppdit.runtime.rounds import ratios
from ppdit.sampler import SamplingConfig
from ppdit.toy.pipefusion import DEFAULT, run_pipefusion, table


def speed(rounds: int) -> list[float]:
    """Layer split's time over PipeFusion's, per round (above 1: PipeFusion faster)."""
    base = LayoutPlan(layout=Layout(layer=2), sampling=SamplingConfig(num_steps=4),
                      source=ModelSource("small"), latent_shape=(1, 16, 8, 32, 32))
    w, m = DEFAULT
    plans = {"layer=2 flush": replace(loop_plan(base), wrap=False),
             "pipefusion=2": loop_plan(replace(base, layout=Layout(pipefusion=2), patches=m,
                                               warmup_steps=w))}
    res = run_layer_splits(plans, rounds, echo=False)
    return ratios(res["layer=2 flush"].makespans_s, res["pipefusion=2"].makespans_s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds and prompts")
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args(argv)
    w, m = DEFAULT
    ideal = (1 - pipefusion_bubble(m, 2, 4, w)) / (1 - pipefusion_bubble(m, 2, 4, 4))
    per_round = speed(3 if a.quick else 7)
    print(f"small preset, 2,048 tokens, 4 steps, 2 ranks: pipefusion=2 (W={w}, M={m}) over "
          f"layer=2 flushing, ideal {ideal:.2f}x by the bubble formula")
    rows = run_pipefusion(n=4 if a.quick else 6, echo=False)
    print(table(rows))
    default = next(r for r in rows if (r.warmup, r.patches) == DEFAULT)
    worst = min(default.colour_accuracy, default.direction_accuracy)
    print(f"the default W={w}, M={m} keeps the toy detector >= 90%: {worst >= 0.9} "
          f"(colour {default.colour_accuracy:.0%}, direction {default.direction_accuracy:.0%}, "
          f"PSNR {default.psnr_db:.1f} dB against layer split)")
    targets = show([Target("pipefusion=2 / layer=2 flush, throughput on the same work",
                           per_round, 1.1, "higher")])
    keep("pipefusion", targets, argv)
    if a.json:
        a.json.write_text(json.dumps({"per_round": per_round, "ideal": ideal, "rows": [
            r.__dict__ for r in rows]}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
