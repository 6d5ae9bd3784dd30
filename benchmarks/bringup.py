"""PP0 vs PP0 + overlap: frames per second of the controller + one mesh rank, side by side.

    python benchmarks/bringup.py           # ~1.5 min on 2 cores
    python benchmarks/bringup.py --quick

Two processes (rank 0: streaming VAE decode; rank 1: the tiny DiT generating chunks), one
thread each, configured so that generating a chunk and decoding one take comparable time. PP0
waits for each chunk before asking for the next; the overlap phase keeps two envelopes in
flight, so the mesh generates chunk k + 1 while rank 0 decodes chunk k. Ideal ratio:
(generate + decode) / max(generate, decode). Target: overlap >= 1.5x PP0, per round
(``record.py``'s rule).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from record import Target, keep, show

from ppdit.runtime.rounds import median_ratio, ratios
from ppdit.serve.config import BringupConfig
from ppdit.serve.system import run_bringups


def run(chunks: int, rounds: int, num_steps: int) -> dict:
    """Both phases in one launch, interleaved; medians over rounds."""
    base = dict(chunks=chunks, num_steps=num_steps, chunk_frames=2)
    res = run_bringups({"pp0": BringupConfig(phase="pp0", **base),
                        "overlap": BringupConfig(phase="overlap", **base)}, rounds, echo=False)
    gen = statistics.median(s.duration_s for r in res["pp0"] for s in r.trace.select("compute"))
    dec = statistics.median(s.duration_s for r in res["pp0"] for s in r.trace.select("decode"))
    fps = {k: [r.fps for r in v] for k, v in res.items()}
    ratio = median_ratio(fps["overlap"], fps["pp0"])
    return {"generate_ms": gen * 1e3, "decode_ms": dec * 1e3,
            "fps": {k: statistics.median(v) for k, v in fps.items()},
            "ttff_s": {k: statistics.median(r.time_to_first_frame_s for r in v)
                       for k, v in res.items()},
            "overlap_over_pp0": ratio, "ideal": (gen + dec) / max(gen, dec),
            "rounds": {"overlap_over_pp0": ratios(fps["overlap"], fps["pp0"])}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    out = run(chunks=6 if a.quick else 10, rounds=5, num_steps=12)
    print(f"per chunk: generate {out['generate_ms']:.0f} ms (mesh), decode "
          f"{out['decode_ms']:.0f} ms (rank 0)")
    for k in ("pp0", "overlap"):
        print(f"{k:8s}: {out['fps'][k]:6.1f} frames/s, first frame after "
              f"{out['ttff_s'][k] * 1e3:.0f} ms")
    print(f"overlap / pp0 = {out['overlap_over_pp0']:.2f}x (ideal {out['ideal']:.2f}x)")
    out["targets"] = show([Target("overlap / PP0, frames per second",
                                  out["rounds"]["overlap_over_pp0"], 1.5, "higher")])
    keep("bringup", out["targets"], argv)
    if a.json:
        a.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
