"""Wan 2.2's two experts over two step-split stages, side by side in one run (one thread a rank).

    python benchmarks/experts.py            # 8 requests, 9 rounds (~2 min on 2 cores)
    python benchmarks/experts.py --quick    # 5 rounds

A tiny two-expert folder (built here; T2V A14B's boundary 0.875 and flow shift 12, UniPC, 40
steps: 26 high-noise and 14 low-noise) serves R = 8 requests four ways, interleaved:

* one device holding both experts, one request at a time;
* the stages cut at the expert boundary (26 + 14 steps): each rank holds one expert, and the
  pipeline runs at the longer stage's pace (``analysis.bubbles.uneven_speedup``);
* the stages cut evenly (20 + 20): balanced, but stage 1 holds both experts;
* two independent replicas of the one device (this machine's ceiling for two ranks).

Target: the boundary cut reaches >= 90% of its predicted speedup scaled to the ceiling measured
in the same rounds (``record.py``'s rule). The experts each stage holds are printed: what the
even cut pays for its balance (a rank holding one expert: tests/ranks/test_t2v.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from record import Target, keep, show

from ppdit.analysis.bubbles import uneven_speedup
from ppdit.checkpoint.solver import folder_sampling, step_experts
from ppdit.checkpoint.source import ModelSource
from ppdit.checkpoint.tiny import build_tiny_pipeline
from ppdit.parallel.step_split.plan import StepSplitPlan, expert_stages
from ppdit.parallel.step_split.run import run_step_splits
from ppdit.runtime.rounds import ratios
from ppdit.sampler import Request

STEPS, REQUESTS = 40, 8


def run(folder: Path, rounds: int) -> dict:
    """The four plans in one launch; per-round makespans and each plan's parameters per rank."""
    source = ModelSource(folder=str(folder))
    sampling = folder_sampling(source.scheduler(), STEPS, 1.0,
                               boundary_ratio=source.boundary_ratio)
    requests = tuple(Request(i, i) for i in range(REQUESTS))
    common = dict(sampling=sampling, source=source, solver="folder")
    probe = StepSplitPlan(requests, (range(STEPS),), **common)
    cut = tuple(expert_stages(step_experts(probe), 2))
    plans = {"one device": probe,
             "boundary cut": StepSplitPlan(requests, cut, **common),
             "even cut": StepSplitPlan(requests, (range(20), range(20, STEPS)), **common),
             "2 replicas": StepSplitPlan(requests, (range(STEPS),), replicas=2, **common)}
    res = run_step_splits(plans, rounds, echo=False)
    experts = step_experts(probe)  # a stage loads the experts of its steps (run alone: the
    return {"cut": [len(r) for r in cut],  # plans of one job share each rank's model)
            "makespans": {k: r.makespans_s for k, r in res.items()},
            "experts": {k: [len({experts[i] for i in st}) for st in p.stages]
                        for k, p in plans.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ppdit-moe-") as tmp:
        out = run(build_tiny_pipeline(Path(tmp) / "moe", boundary_ratio=0.875),
                  5 if a.quick else 9)
    t, cut = out["makespans"], out["cut"]
    predicted = {"boundary cut": uneven_speedup(REQUESTS, cut),
                 "even cut": uneven_speedup(REQUESTS, [20, 20]), "2 replicas": 2.0}
    print(f"{REQUESTS} requests x {STEPS} steps, the boundary cut at {cut[0]} + {cut[1]}")
    print(f"  {'plan':14s}{'s (median)':>11s}{'vs one':>8s}{'predicted':>11s}  experts a stage "
          "holds")
    for k, v in t.items():
        x = statistics.median(ratios(t["one device"], v))
        print(f"  {k:14s}{statistics.median(v):11.2f}{x:7.2f}x{predicted.get(k, 1.0):10.2f}x  "
              f"{', '.join(map(str, out['experts'][k]))}")
    ceiling = ratios(t["one device"], t["2 replicas"])
    share = [f / (c / 2 * predicted["boundary cut"])
             for f, c in zip(ratios(t["one device"], t["boundary cut"]), ceiling, strict=True)]
    targets = show([Target("boundary cut, share of its predicted speedup at this machine's "
                           "ceiling", share, 0.9, "higher", unit="")])
    keep("experts", targets, argv)
    if a.json:
        out["speedup"] = {k: statistics.median(ratios(t["one device"], v)) for k, v in t.items()}
        a.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
