"""Block splits from measured time, live: layer split on 2 ranks where rank 0 also decodes a
preview of every latent that comes back to it (StreamDiffusionV2's first rank), before and
after one rebalance.

    python benchmarks/rebalance.py            # ~2 min on 2 cores
    python benchmarks/rebalance.py --quick    # ~1 min

One launch measures the even split (4 + 4 blocks of the small preset, 4 requests as 4
micro-batches, the wrap, 4 steps): each rank's busy time (its blocks, and rank 0's decodes)
and its blocks' time alone. ``partition.rebalanced_sizes`` solves the exact contiguous split
with rank 0's decodes kept on it, and a second launch runs the even and the rebalanced split
side by side, interleaved round by round. Target: the rebalanced split's throughput >= 1.05x
the even one's per round (``record.py``'s rule); the bubble share (1 - busy / (P x window),
the decodes counted busy) of each is printed beside it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace

from record import Target, keep, show

from ppdit.analysis.bubbles import measured_bubble
from ppdit.analysis.trace_stats import kind_totals
from ppdit.checkpoint.source import ModelSource
from ppdit.parallel.layer_split.run import run_layer_splits
from ppdit.parallel.layer_split.schedule import LayerSplitPlan
from ppdit.parallel.partition import forced_costs, rebalanced_sizes
from ppdit.runtime import ranks
from ppdit.runtime.rounds import ratios
from ppdit.sampler import Request, SamplingConfig

BUSY = ("compute", "decode")  # rank 0's decodes are work, not bubble


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    a = ap.parse_args(argv)
    even = LayerSplitPlan(tuple(Request(i, i) for i in range(4)), 2, 4, wrap=True,
                          sampling=SamplingConfig(num_steps=4), source=ModelSource("small"),
                          latent_shape=(1, 16, 2, 32, 32), decode_previews=True)
    sizes = [len(c[0]) for c in even.chunks()]
    with ranks(2) as pool:
        seen = run_layer_splits({"even": even}, 3, echo=False, pool=pool)["even"]
        spent = kind_totals(seen.trace).values()
        rank_s = [k["compute"] + k.get("decode", 0.0) for k in spent]
        block_s = [k["compute"] for k in spent]
        new = rebalanced_sizes(sizes, rank_s, block_s)
        plans = {"even": even, "rebalanced": replace(even, block_costs=forced_costs(new))}
        res = run_layer_splits(plans, 3 if a.quick else 7, echo=False, pool=pool)
    per_block = [t / n for t, n in zip(block_s, sizes, strict=True)]
    print(f"even split {sizes}: busy per rank {', '.join(f'{t:.2f} s' for t in rank_s)} "
          f"(rank 0's decodes {rank_s[0] - block_s[0]:.2f} s); a block "
          f"{', '.join(f'{t * 1e3:.0f} ms' for t in per_block)} per rank")
    print(f"rebalanced from that round: {new} blocks")
    for name, r in res.items():
        print(f"{name:>10}: bubble share {measured_bubble(r.trace, 2, BUSY):.0%} (median round), "
              f"window {statistics.median(r.makespans_s):.2f} s")
    per_round = ratios(res["even"].makespans_s, res["rebalanced"].makespans_s)
    targets = show([Target("rebalanced / even split with rank 0 decoding, throughput",
                           per_round, 1.05, "higher")])
    keep("rebalance", targets, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
