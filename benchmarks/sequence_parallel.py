"""Sequence parallelism (Ulysses, V-first on and off) vs tensor parallelism vs one device.

    python benchmarks/sequence_parallel.py           # ~1.5 min on 2 cores
    python benchmarks/sequence_parallel.py --quick

One forward pass of the small preset on a 2,048-token latent (1, 16, 8, 32, 32), on 2 ranks
with one thread each (one device = rank 0 alone), every variant interleaved round by round in
one launch. Prints seconds per forward and ratios against one device, and the bytes each
layout moves per block (formulas, fp32).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ppdit.parallel.compare import LayoutCompare, run_compare
from ppdit.parallel.sequence.comms import a2a_bytes_per_layer
from ppdit.parallel.tensor.comms import tp_comm_per_block


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    spec = LayoutCompare(forwards=1 if a.quick else 2, rounds=3 if a.quick else 5)
    res = run_compare(spec, echo=False)
    p = spec.source.spec
    tokens = p.num_tokens(spec.latent_shape)
    sp_bytes = a2a_bytes_per_layer(batch=1, tokens=tokens, dim=p.dim, degree=2,
                                   bytes_per_element=4)
    tp_bytes = tp_comm_per_block(batch=1, tokens=tokens, text_len=p.text_len, dim=p.dim, tp=2,
                                 bytes_per_element=4).wire_bytes_per_rank
    print(f"{spec.source.name} preset, latent {spec.latent_shape} ({tokens} tokens), 2 ranks")
    print(f"{'variant':14s} {'s/forward':>10s} {'vs one device':>14s}")
    for name, sec in res.seconds.items():
        print(f"{name:14s} {sec:10.3f} {res.speedup(name):13.2f}x")
    vf = res.speedup("SP, V-first", "SP, V last")
    print(f"V-first over V last: {vf:.2f}x")
    print(f"bytes sent per rank per block: SP {sp_bytes / 1e6:.2f} MB (4 all-to-alls), "
          f"TP {tp_bytes / 1e6:.2f} MB (7 all-reduces, ring: 3 of them sequence-sized)")
    if a.json:
        a.json.write_text(json.dumps({"seconds": res.seconds, "rounds": res.rounds,
                                      "v_first_over_v_last": vf, "sp_bytes_per_block": sp_bytes,
                                      "tp_bytes_per_block": tp_bytes}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
