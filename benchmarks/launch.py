"""Start-up per job: fresh ranks (fresh interpreters, or forked from a server) against a job on a
live rank pool, side by side; and whether forked ranks compute as fast as fresh ones.

    python benchmarks/launch.py            # 2 ranks, 9 interleaved rounds (~3 min on 2 cores)
    python benchmarks/launch.py --quick    # 5 rounds

Each round times, from the caller's side, one job that does almost nothing (``hello``:
an all-reduce of one number) three ways:

* **spawn**: fresh interpreters (``fresh_interpreters()``), which import torch and diffusers,
  ``init_process_group``, run, tear down: what ``torchrun`` and ``mp.spawn`` pay;
* **forked**: fresh ranks forked from the server that imported those libraries once
  (``ppdit.runtime.processes.start``, the default);
* **pool**: a pool's live ranks (hand the job over, run, collect).

Then each way's ranks time the same single-thread matmuls (``matmul_seconds``), so a
cheaper start that made ranks compute slower would show. Targets: a forked launch under 20% of
a spawned one, a pooled job under 10% of a spawned launch, forked ranks' matmuls within 10% of
spawned ranks', each judged per round (``record.py``'s rule). Rounds rotate which variant goes
first, so a slow moment hits all of them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from record import Target, keep, show

from ppdit.runtime import launch, ranks
from ppdit.runtime.observe.timing import timed
from ppdit.runtime.processes.hello import hello, matmul_seconds
from ppdit.runtime.processes.start import fresh_interpreters
from ppdit.runtime.rounds import median_ratio, ratios

VARIANTS = ("spawn", "forked", "pool")


def _run(variant: str, pool, world_size: int, worker) -> list:
    if variant == "pool":
        return pool.run(worker)
    if variant == "spawn":
        with fresh_interpreters():
            return launch(worker, world_size, timeout_s=180, echo=False)
    return launch(worker, world_size, timeout_s=180, echo=False)


def measure(world_size: int, rounds: int) -> dict:
    """Seconds per job and per rank's matmuls, for each variant and round (the pool's own
    start and the fork server's imports are paid before the clock)."""
    jobs = {v: [] for v in VARIANTS}
    matmul = {v: [] for v in VARIANTS}
    with ranks(world_size, echo=False, timeout_s=180) as pool:
        pool.run(hello)
        for k in range(rounds):
            order = VARIANTS[k % 3:] + VARIANTS[:k % 3]
            for variant in order:
                with timed() as t:
                    _run(variant, pool, world_size, hello)
                jobs[variant].append(t.seconds)
                matmul[variant].append(max(_run(variant, pool, world_size,
                                                matmul_seconds)))
    forked = median_ratio(jobs["forked"], jobs["spawn"])
    pooled = median_ratio(jobs["pool"], jobs["spawn"])
    compute = median_ratio(matmul["forked"], matmul["spawn"])
    return {"world_size": world_size, "job_s": jobs, "matmul_s": matmul,
            "forked_over_spawn": forked, "pool_over_spawn": pooled,
            "forked_matmul_over_spawn": compute,
            "rounds": {"forked": ratios(jobs["forked"], jobs["spawn"]),
                       "pooled": ratios(jobs["pool"], jobs["spawn"]),
                       "matmuls": [abs(r - 1) for r in ratios(matmul["forked"],
                                                              matmul["spawn"])]}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="5 rounds instead of 9")
    ap.add_argument("--ranks", type=int, default=2, help="world size")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args(argv)
    out = measure(args.ranks, 5 if args.quick else 9)
    print(f"{args.ranks} ranks, {len(out['job_s']['spawn'])} interleaved rounds (median, "
          "min-max)")
    for v in VARIANTS:
        j, m = out["job_s"][v], out["matmul_s"][v]
        print(f"  {v:6s}  job {statistics.median(j):7.3f} s ({min(j):.3f}-{max(j):.3f})   "
              f"200 matmuls {statistics.median(m) * 1e3:6.1f} ms ({min(m) * 1e3:.1f}-"
              f"{max(m) * 1e3:.1f})")
    r = out["rounds"]
    out["targets"] = show([
        Target("forked launch / spawned launch", r["forked"], 0.20, digits=3),
        Target("pooled job / spawned launch", r["pooled"], 0.10, digits=3),
        Target("|forked / spawned ranks' matmuls - 1|", r["matmuls"], 0.10, unit="",
               digits=3)])
    keep("launch", out["targets"], argv)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
