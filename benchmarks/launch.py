"""Start-up per job: a fresh ``launch`` against a job on a live rank pool, side by side.

    python benchmarks/launch.py            # 2 ranks, 5 interleaved rounds (~40 s on 2 cores)
    python benchmarks/launch.py --quick    # 3 rounds

Each round times, from the caller's side, one job that does almost nothing (``probes.hello``:
an all-reduce of one number), first on fresh ranks (spawn, import torch and diffusers,
``init_process_group``, run, tear down), then on a pool's live ranks (hand the job over, run,
collect). The difference is what a notebook saves each time it launches through a pool.
Target: a pooled job costs under 10% of a fresh launch.

Rounds alternate which variant goes first, so a slow moment of the machine hits both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from ppdit.runtime import launch, probes, ranks
from ppdit.runtime.rounds import median_ratio


def measure(world_size: int, rounds: int) -> dict:
    """Seconds per job, fresh and pooled, for each round (the pool's own start not counted)."""
    fresh, pooled = [], []
    with ranks(world_size, echo=False, timeout_s=120) as pool:
        pool.run(probes.hello)  # the pool's one start-up, paid before the clock
        for k in range(rounds):
            order = ("fresh", "pool") if k % 2 == 0 else ("pool", "fresh")
            for variant in order:
                start = time.perf_counter()
                if variant == "fresh":
                    launch(probes.hello, world_size, timeout_s=120, echo=False)
                    fresh.append(time.perf_counter() - start)
                else:
                    pool.run(probes.hello)
                    pooled.append(time.perf_counter() - start)
    ratio = median_ratio(pooled, fresh)
    return {"world_size": world_size, "fresh_s": fresh, "pool_s": pooled,
            "pool_over_fresh": ratio, "target": "pooled job < 0.10 x fresh launch",
            "ok": ratio < 0.10}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 rounds")
    ap.add_argument("--ranks", type=int, default=2, help="world size")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args(argv)
    out = measure(args.ranks, 3 if args.quick else 5)
    f, p = out["fresh_s"], out["pool_s"]
    print(f"{args.ranks} ranks, {len(f)} interleaved rounds (median, min-max)")
    print(f"  fresh launch  {statistics.median(f):7.3f} s  ({min(f):.3f}-{max(f):.3f})")
    print(f"  pooled job    {statistics.median(p):7.3f} s  ({min(p):.3f}-{max(p):.3f})")
    print(f"  pooled / fresh {out['pool_over_fresh']:.3f} (median of per-round ratios); "
          f"target {out['target']}: {'OK' if out['ok'] else 'MISSED'}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
