"""Tensor parallelism at TP=2 on the small preset, every variant side by side in one run.

    python benchmarks/tensor_parallel.py            # 17 rounds x 10 forwards (~4 min)
    python benchmarks/tensor_parallel.py --quick    # 5 rounds x 5 forwards (~1.5 min)

Two ranks, one thread each (gloo on CPU, NCCL when two GPUs are visible); one forward of the
small preset (8 blocks, D=256, 320 tokens) per measurement. Variants, all in the same launch and
interleaved round by round: one device (every rank runs the unsharded model) and TP=2 with
functional collectives, in-place c10d, and DTensor, each eager and compiled
(``torch.compile(fullgraph=True)`` per block). Ratios are medians over rounds of per-round
ratios, so a slow minute on a shared machine cancels out; a target is judged on the per-round
ratios (``record.py``'s rule), so a miss is told from noise.

Targets (issue 4): compiled funcol >= 1.0x compiled DTensor; compiled >= 1.3x eager (funcol).
The first compile fills ``<repo>/.cache/inductor``; later runs load from it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from record import Target, keep, show

from ppdit.analysis.tp_styles import TPCompare, TPVariant, run_tp_compare, speedup
from ppdit.checkpoint.source import ModelSource
from ppdit.runtime.rounds import ratios

V = TPVariant
VARIANTS = tuple(V(s, c) for s in ("single", "funcol", "c10d", "dtensor") for c in (False, True))
# (label, faster candidate, baseline, target): ratio = time(baseline) / time(candidate)
RATIOS = [
    ("compiled funcol vs compiled DTensor", "funcol compiled", "dtensor compiled", 1.0),
    ("eager funcol vs eager DTensor", "funcol", "dtensor", None),
    ("compiled vs eager, funcol TP=2", "funcol compiled", "funcol", 1.3),
    ("compiled vs eager, DTensor TP=2", "dtensor compiled", "dtensor", None),
    ("compiled vs eager, one device", "single compiled", "single", None),
    ("eager in-place c10d vs eager funcol", "c10d", "funcol", None),
    ("compiled c10d vs compiled funcol", "c10d compiled", "funcol compiled", None),
    ("TP=2 vs one device, eager (funcol)", "funcol", "single", None),
    ("TP=2 vs one device, compiled (funcol)", "funcol compiled", "single compiled", None),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="5 rounds instead of 17")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args(argv)
    spec = TPCompare(VARIANTS, source=ModelSource(a.preset), rounds=5 if a.quick else 17,
                     repeats=5 if a.quick else 10, warmup=2)
    # rank 0's view; rank 1 runs in lockstep; 17 rounds with compiles can outlast 600 s here
    res = run_tp_compare(spec, 2, echo=False, timeout_s=1200)[0]
    print(f"TP=2, preset {a.preset}, latent {spec.shape}, 2 ranks x 1 thread, "
          f"{spec.rounds} rounds x {spec.repeats} forwards")
    print(f"  {'variant':18s} {'forward ms':>11s} {'compile s':>10s} {'max |diff|':>11s} "
          f"{'params/rank':>12s} {'all-reduces':>12s}")
    for name, r in res.items():
        comp = f"{r.compile_s:10.1f}" if r.compile_s is not None else f"{'-':>10s}"
        print(f"  {name:18s} {r.median_s * 1e3:11.2f} {comp} {r.max_abs_diff:11.1e} "
              f"{r.local_params:12,d} {r.collectives:12d}")
    print("  ratios (time of baseline / time of candidate; > 1: candidate faster), median and "
          "range over rounds")
    rows, targets = [], []
    for label, fast, base, target in RATIOS:
        x = speedup(res, fast, base)
        per_round = ratios(res[base].forward_s, res[fast].forward_s)
        if target is not None:
            targets.append(Target(label, per_round, target, "higher"))
            continue
        lo, hi = min(per_round), max(per_round)
        print(f"  {label:40s} {x:6.2f}x  [{lo:.2f}-{hi:.2f}]")
        rows.append({"label": label, "ratio": x, "range": [lo, hi], "target": target})
    print("  targets (per-round ratios)")
    keep("tensor_parallel", show(targets), argv)
    if a.json:
        a.json.write_text(json.dumps({"ratios": rows, "ms": {n: r.median_s * 1e3
                                                             for n, r in res.items()}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
