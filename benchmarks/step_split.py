"""Step-split PP against one device, measured side by side in one run (one thread per rank).

    python benchmarks/step_split.py            # full table (5-10 min on 2 cores)
    python benchmarks/step_split.py --quick    # fewer repeats and requests (~2 min)

(a) one request, P=2 vs one device: a lone request gains nothing from step split; it should
    lose its handoff and little more (a second process's wake-ups). Target: P=2 <= 1.1 x (one
    device + handoff); the earlier 1.03 x sat at the measured value, a verdict no run settles.
(b) R requests, P=2 pipeline-filled vs one device one at a time, all of them batched, and two
    independent ranks (data parallel: what this machine's two cores give, 1.5-2.1x in a run).
    Target: filled >= 90% of the ideal R P / (R + P - 1) scaled to that ceiling, measured in
    the same rounds (the fixed ideal is printed too); stream batch not behind batched by more
    than 10% (>= 0.9 x: at R = 8 the two are level, 0.98-1.09 x in six runs, so ">= 1 x" was
    a coin toss; at R = 32 stream batch leads, 1.3-1.5 x).
(c) the handoff of the earlier report's (1, 8, 8, 32, 32) fp32 latent: ppdit's frame vs a bare
    dist.send/recv of the same tensor, in the same run. The wall-time ratio is printed with its
    spread but judged no more: on two cores it is mostly waking the peer (0.89-1.24 x in six
    runs, same code), the scheduler's and not ppdit's. Target: <= 50 us of host CPU per message
    beyond the bare operation (the calling thread's CPU time: stable on a busy machine, and what
    a GPU does not shrink: the floor under an NCCL handoff), for step split's frame and for
    layer split's hop (a copy in, a copy out).

Every target is judged on per-round values by ``benchmarks/record.py``'s rule; (a) and (b) add
rounds while a verdict is inconclusive but within reach (``until_settled``: 9 rounds, then up
to 61 for one request, 31 at R = 8 and 15 at R = 32, whose rounds cost ~1, 5 and 25 s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from functools import partial
from pathlib import Path

from record import Rounds, Target, keep, show, until_settled

from ppdit.analysis.measure import handoff_pingpong
from ppdit.analysis.trace_stats import handoff_latencies
from ppdit.parallel.step_split.plan import make_plan
from ppdit.parallel.step_split.run import run_step_splits
from ppdit.runtime import launch
from ppdit.runtime.rounds import median_ratio, ratios
from ppdit.sampler import SamplingConfig
from ppdit.teaching.verdict import verdict

REPORT_LATENT = (1, 8, 8, 32, 32)
LAUNCH_S = 1200  # one batch of rounds in one launch: R = 32's 15 rounds take ~400 s here
REPORT_HANDOFF_MS = {"NCCL, per handoff (report's estimate)": 500.0,
                     "gloo, 28 steps 1->2 ranks (report's table)": (4.22 - 3.99) * 1e3}


def one_request(rounds: int) -> Rounds:
    """(a) One request on one device and over two stages, interleaved: per-round makespans and
    the round's median handoff."""
    sampling = SamplingConfig(num_steps=28)
    res = run_step_splits({"one": make_plan(1, 1, sampling=sampling),
                            "p2": make_plan(2, 1, sampling=sampling)}, rounds, echo=False,
                          timeout_s=LAUNCH_S)
    return {"one": res["one"].makespans_s, "p2": res["p2"].makespans_s,
            "handoff": [statistics.median(handoff_latencies(t)) for t in res["p2"].traces]}


def one_request_targets(rd: Rounds) -> list[Target]:
    bound = [o + h for o, h in zip(rd["one"], rd["handoff"], strict=True)]
    return [Target("P=2 / (one device + handoff)", ratios(rd["p2"], bound), 1.1, digits=3)]


def summarize_one(rd: Rounds) -> dict:
    return {"one_device_s": statistics.median(rd["one"]), "p2_s": statistics.median(rd["p2"]),
            "handoff_s": statistics.median(rd["handoff"]), "p2_over_one_plus_handoff":
            one_request_targets(rd)[0].check()["median"], "rounds": rd}


def filled(num_requests: int, rounds: int) -> Rounds:
    """(b) R requests: P=2 filled and stream batch vs one device, one at a time and batched,
    and two independent ranks (data parallel: this machine's two-core ceiling)."""
    sampling, r = SamplingConfig(num_steps=28), num_requests
    res = run_step_splits({
        "seq": make_plan(1, r, sampling=sampling),
        "batched": make_plan(1, r, sampling=sampling, micro_batch=r),
        "filled": make_plan(2, r, sampling=sampling),
        "stream": make_plan(2, r, sampling=sampling, mode="stream_batch"),
        "dp": make_plan(1, r, sampling=sampling, replicas=2),
    }, rounds, echo=False, timeout_s=LAUNCH_S)
    return {k: v.makespans_s for k, v in res.items()}


def filled_targets(r: int, t: Rounds) -> list[Target]:
    """Filling against the ideal R P / (R + P - 1) scaled to the two-independent-ranks ceiling
    of the same round; stream batch not behind plain batching by more than 10%."""
    share = [d / f * (r + 1) / r for d, f in zip(t["dp"], t["filled"], strict=True)]
    return [Target(f"R={r}: filled, share of the ideal at this machine's ceiling", share, 0.9,
                   "higher", unit=""),
            Target(f"R={r}: stream batch / batched", ratios(t["batched"], t["stream"]), 0.9,
                   "higher")]


def summarize_filled(r: int, t: Rounds) -> dict:
    ideal, fill_x = r * 2 / (r + 1), median_ratio(t["seq"], t["filled"])
    return {"R": r, **{f"{k}_s": statistics.median(v) for k, v in t.items()},
            "batching_alone_x": median_ratio(t["seq"], t["batched"]),
            "two_independent_x": median_ratio(t["seq"], t["dp"]),
            "filled_vs_one_at_a_time_x": fill_x, "ideal_x": ideal,
            "filled_share_of_ideal": fill_x / ideal,
            "filled_vs_batched_x": median_ratio(t["batched"], t["filled"]),
            "stream_batch_vs_batched_x": median_ratio(t["batched"], t["stream"]), "rounds": t}


def handoff(rounds: int) -> dict:
    """(c) Ping-pong of the report's latent: bare send/recv vs ppdit's frames vs headers, in
    wall time per one-way trip and host CPU time per message."""
    got = launch(handoff_pingpong, 2, args=(REPORT_LATENT, rounds, 400), threads_per_rank=1,
                 echo=False)[0]  # 400 trips a round: a round's host time is ~1 s of clock
    # median one-way milliseconds per way: medians resist the other core's noise
    ms = {k: statistics.median(v) * 1e3 for k, v in got["seconds"].items()}
    cpu = got["cpu_seconds"]
    extra = {w: [(a - b) * 1e6 for a, b in zip(cpu[w], cpu["bare"], strict=True)]
             for w in ("frame", "layer hop")}
    return {"latent": list(REPORT_LATENT), **{f"{k}_ms": v for k, v in ms.items()},
            "frame_over_bare": ms["frame"] / ms["bare"], "report_ms": REPORT_HANDOFF_MS,
            "host_us": {w: statistics.median(v) * 1e6 for w, v in cpu.items()},
            "rounds": {"frame_over_bare": ratios(got["seconds"]["frame"], got["seconds"]["bare"]),
                       **{f"{w} host us beyond bare": v for w, v in extra.items()}}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats and requests")
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args(argv)
    first, most = (5, 9) if a.quick else (9, 61)  # most: R=1, 8, 32 (rounds of ~1, 5, 25 s)
    out = {"a_one_request": summarize_one(until_settled(one_request, one_request_targets,
                                                        first, most)),
           "b_filled": [summarize_filled(r, until_settled(partial(filled, r),
                                                          partial(filled_targets, r), first,
                                                          min(most, 31 if r <= 8 else 15)))
                        for r in ((8,) if a.quick else (8, 32))],
           "c_handoff": handoff(7 if a.quick else 15)}
    out["targets"] = _print(out)
    keep("step_split", out["targets"], argv)
    if a.json:
        a.json.write_text(json.dumps(out, indent=2))
    return 0


def _print(out: dict) -> list[dict]:
    a, rows = out["a_one_request"], []
    print("(a) one request, 28 steps, tiny preset")
    print(f"    one device {a['one_device_s'] * 1e3:7.1f} ms | P=2 {a['p2_s'] * 1e3:7.1f} ms | "
          f"handoff {a['handoff_s'] * 1e3:.2f} ms (medians)")
    rows += show(one_request_targets(a["rounds"]))
    print("(b) R requests, throughput ratios (higher is better; medians of per-round ratios)")
    print("     R | batching | 2 independent | filled/1-at-a-time (fixed ideal, share) | "
          "filled/batched")
    for r in out["b_filled"]:
        print(f"    {r['R']:2d} | {r['batching_alone_x']:7.2f}x | "
              f"{r['two_independent_x']:12.2f}x | {r['filled_vs_one_at_a_time_x']:5.2f}x "
              f"({r['ideal_x']:.2f}x, {r['filled_share_of_ideal']:6.1%}){'':14s}| "
              f"{r['filled_vs_batched_x']:13.2f}x")
        rows += show(filled_targets(r["R"], r["rounds"]))
    c = out["c_handoff"]
    print(f"(c) handoff of a {tuple(c['latent'])} fp32 latent (one way, median)")
    print(f"    bare send/recv {c['bare_ms']:.3f} ms | ppdit frame {c['frame_ms']:.3f} ms | "
          f"layer hop {c['layer hop_ms']:.3f} ms | header+payload "
          f"{c['header+payload_ms']:.3f} ms")
    print("    host CPU per message: " + ", ".join(f"{w} {us:.1f} us"
                                                  for w, us in c["host_us"].items()))
    wall = verdict(c["rounds"]["frame_over_bare"], 1.0)
    print(f"    frame / bare send, wall time: {wall.describe()} (no target: see the docstring)")
    rows += show([*(Target(f"{w}: host CPU per message beyond the bare operation",
                           c["rounds"][f"{w} host us beyond bare"], 50.0, unit=" us",
                           digits=1) for w in ("frame", "layer hop"))])
    for k, v in c["report_ms"].items():
        print(f"    {k}: {v:.0f} ms  ->  {v / c['frame_ms']:,.0f}x ppdit's frame")
    return rows


if __name__ == "__main__":
    sys.exit(main())
