"""First-Block-Cache's speed against its quality, side by side in one run (one rank, one thread).

    python benchmarks/caching.py            # 6 held-out prompts, 11 rounds (~2 min on 2 cores)
    python benchmarks/caching.py --quick    # 4 prompts, 5 rounds

The trained toy pipeline (``models/toy_shapes``, 20 UniPC steps with guidance) generates its
held-out prompts exactly and at each threshold, interleaved round by round
(``ppdit.toy.caching``). Beside each threshold's time over the exact run: the share of forwards
skipped, what ``analysis.bubbles.cached_time_share`` predicts from it if blocks were all of the
time, the PSNR against the exact videos and the detector's accuracy. Target: at the largest
threshold, where most forwards skip, time / exact <= 0.85 per round (``record.py``'s rule).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from record import Target, keep, show

from ppdit.analysis.bubbles import cached_time_share
from ppdit.toy.caching import run_caching, table

TOY_BLOCKS = 4  # models/toy_shapes' transformer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    rows = run_caching(n=4 if a.quick else 6, rounds=5 if a.quick else 11, echo=False)
    print(table(rows))
    for r in rows[1:]:
        print(f"  threshold {r.threshold:g}: {r.skipped:.0%} skipped predicts time / exact "
              f"{cached_time_share(r.skipped, TOY_BLOCKS):.2f} if blocks were all of the time")
    last = rows[-1]
    targets = show([Target(f"FBC {last.threshold:g}: time / exact", last.time_ratios, 0.85)])
    keep("caching", targets, argv)
    if a.json:
        a.json.write_text(json.dumps({"rows": [_plain(r) for r in rows]}, indent=2))
    return 0


def _plain(row) -> dict:
    return {**asdict(row), "time_ratio": None if row.speedup is None else row.speedup.median}

if __name__ == "__main__":
    sys.exit(main())
