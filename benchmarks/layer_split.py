"""Layer-split PP: ppdit vs torch.distributed.pipelining's ScheduleGPipe, and vs one device.

    python benchmarks/layer_split.py            # ~2 min on 2 cores
    python benchmarks/layer_split.py --quick    # ~1 min

All variants run in one launch of 2 ranks (one thread each), interleaved round by round, on the
same model, requests, steps and micro-batches (P=2, M=4, 8 requests, tiny preset):

* ppdit, flushing every step (the same schedule as GPipe per step) and with the cross-step wrap;
* torch.distributed.pipelining: PipelineStage + ScheduleGPipe, forward only, same stage models;
* one device, the requests one at a time (each micro-batch one request) and all batched.

Target: ppdit >= 1.1x the library on the same work, per round (``record.py``'s rule).
Reported with measured bubbles (compute spans only) and the parameters each rank holds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from record import Target, keep, show

from ppdit.analysis.bubbles import layer_split_bubble, measured_bubble
from ppdit.parallel.layer_split.run import run_layer_splits
from ppdit.parallel.layer_split.schedule import LayerSplitPlan
from ppdit.runtime.rounds import median_ratio, ratios
from ppdit.sampler import Request, SamplingConfig


def run(num_requests: int, steps: int, micro: int, rounds: int) -> dict:
    """Every variant side by side; ratios are medians of per-round ratios."""
    reqs = tuple(Request(i, i) for i in range(num_requests))
    s = SamplingConfig(num_steps=steps)
    plans = {
        "torch GPipe": LayerSplitPlan(reqs, 2, micro, wrap=False, sampling=s),
        "ppdit flush": LayerSplitPlan(reqs, 2, micro, wrap=False, sampling=s),
        "ppdit wrap": LayerSplitPlan(reqs, 2, micro, wrap=True, sampling=s),
        "one device, one at a time": LayerSplitPlan(reqs, 1, num_requests, sampling=s),
        "one device, batched": LayerSplitPlan(reqs, 1, 1, sampling=s),
    }
    res = run_layer_splits(plans, rounds=rounds, engines={"torch GPipe": "torch"}, echo=False)
    t = {k: v.makespans_s for k, v in res.items()}

    def ratio(a: str, b: str) -> float:  # throughput of b over a
        return median_ratio(t[a], t[b])

    rows = {}
    for name, r in res.items():
        p = r.plan
        rows[name] = {
            "requests_per_s": r.throughput(),
            "vs_torch": ratio("torch GPipe", name),
            "vs_one_at_a_time": ratio("one device, one at a time", name),
            "vs_batched": ratio("one device, batched", name),
            "bubble_measured": statistics.median(measured_bubble(tr, p.num_stages)
                                                 for tr in r.traces),
            "bubble_formula": layer_split_bubble(p.micro_batches, p.num_stages, p.virtual,
                                                 steps, p.wrap) if p.num_stages > 1 else 0.0,
            "params_per_rank": r.params_per_rank,
        }
    vs_torch = {n: ratios(t["torch GPipe"], t[n]) for n in ("ppdit flush", "ppdit wrap")}
    return {"config": {"requests": num_requests, "steps": steps, "P": 2, "M": micro,
                       "rounds": rounds, "preset": "tiny"}, "rows": rows, "rounds": vs_torch}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps and rounds")
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args(argv)
    out = run(8, 8 if a.quick else 16, 4, 5 if a.quick else 7)
    c = out["config"]
    print(f"layer split, P={c['P']}, M={c['M']}, {c['requests']} requests x {c['steps']} steps, "
          f"{c['preset']} preset, {c['rounds']} interleaved rounds")
    print(f"{'variant':28s} {'req/s':>7s} {'vs torch':>9s} {'vs 1-at-a-time':>15s} "
          f"{'vs batched':>11s} {'bubble (formula)':>17s}  params/rank")
    for name, r in out["rows"].items():
        print(f"{name:28s} {r['requests_per_s']:7.2f} {r['vs_torch']:8.2f}x "
              f"{r['vs_one_at_a_time']:14.2f}x {r['vs_batched']:10.2f}x "
              f"{r['bubble_measured']:8.1%} ({r['bubble_formula']:5.1%})  {r['params_per_rank']}")
    out["targets"] = show([Target(f"{n} / torch GPipe, throughput on the same work", v, 1.1,
                                  "higher") for n, v in out["rounds"].items()])
    keep("layer_split", out["targets"], argv)
    if a.json:
        a.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
