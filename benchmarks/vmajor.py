"""V-Major selective communication: bytes saved against quality lost, over thresholds.

    python benchmarks/vmajor.py            # 8 held-out prompts, ~1.5 min on 2 cores
    python benchmarks/vmajor.py --quick    # 4 prompts

The trained toy pipeline (models/toy_shapes) with guidance and its UniPC scheduler, Ulysses on
2 ranks, every threshold in one launch (``ppdit.toy.vmajor``). Prints, per threshold, the share
of V's rows sent, the share of all self-attention all-to-all bytes saved, the pixel error
against the exact videos and the detector's colour and direction accuracy.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from ppdit.toy.vmajor import run_ablation, table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    n = 4 if a.quick else 8
    rows = run_ablation(n=n, timeout_s=900, echo=False)
    print(f"V-Major on the toy pipeline: {n} held-out prompts, Ulysses on 2 ranks, 12 UniPC "
          "steps with guidance")
    print(table(rows))
    if a.json:
        a.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
