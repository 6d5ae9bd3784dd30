"""Sequence parallelism (Ulysses, V-first on and off; ring attention) vs TP vs one device.

    python benchmarks/sequence_parallel.py           # ~1.5 min on 2 cores
    python benchmarks/sequence_parallel.py --quick

One forward pass of the small preset on a 2,048-token latent (1, 16, 8, 32, 32), on 2 ranks
with one thread each (one device = rank 0 alone), every variant interleaved round by round in
one launch. Prints seconds per forward and ratios against one device, and the bytes each
layout moves per block (formulas, fp32). Then diffusers' own context parallelism
(``ContextParallelConfig(ulysses_degree=2)``) against ppdit's Ulysses on the same forward,
round by round. Target: ppdit at least as fast (``record.py``'s rule). Last, the same on a Wan
2.2 TI2V-shaped model (48 latent channels, a timestep per token, the image's frame at t = 0)
over 4 ranks (time-sliced on 2 cores): target within 1.05x of diffusers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import torch
from record import Target, keep, show

from ppdit.analysis.layout_compare import RING, VARIANTS, LayoutCompare, run_compare
from ppdit.parallel.sequence.comms import a2a_bytes_per_layer
from ppdit.parallel.tensor.comms import tp_comm_per_block
from ppdit.presets import get_preset
from ppdit.runtime.processes.launch import launch
from ppdit.runtime.rounds import ratios

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' helpers, by package
from tests.support.diffusers_cp import compare_worker


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    spec = LayoutCompare(forwards=1 if a.quick else 2, rounds=3 if a.quick else 5,
                         variants=(*VARIANTS, RING))
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
    cp = launch(compare_worker, 2, args=(spec.source.name, spec.latent_shape, 5 if a.quick else 7),
                echo=False, threads_per_rank=1)[0]
    theirs, ours = (statistics.median(cp["seconds"][k]) for k in ("diffusers", "ppdit"))
    same = torch.equal(cp["diffusers"], cp["one"]) and torch.equal(cp["ppdit"], cp["one"])
    print(f"diffusers' ContextParallelConfig(ulysses_degree=2) vs ppdit's Ulysses, one forward: "
          f"{theirs:.3f} s vs {ours:.3f} s (medians); both equal one device bit for bit: {same}")
    ti2v = replace(get_preset("small"), name="small-ti2v", in_channels=48,
                   latent_shape=(1, 48, 3, 32, 32), expand_timesteps=True)
    cp4 = launch(compare_worker, 4, args=(ti2v, ti2v.latent_shape, 5 if a.quick else 7),
                 echo=False, threads_per_rank=1)[0]
    same4 = torch.equal(cp4["diffusers"], cp4["one"]) and torch.equal(cp4["ppdit"], cp4["one"])
    print(f"TI2V-shaped ({ti2v.num_tokens()} tokens, a timestep per token) on 4 ranks: "
          f"diffusers {statistics.median(cp4['seconds']['diffusers']):.3f} s vs ppdit "
          f"{statistics.median(cp4['seconds']['ppdit']):.3f} s; both equal one device bit for "
          f"bit: {same4}")
    keep("sequence_parallel", show([Target(
        "ppdit's Ulysses / diffusers' context parallelism, forwards per second",
        ratios(cp["seconds"]["diffusers"], cp["seconds"]["ppdit"]), 1.0, "higher"), Target(
        "TI2V on 4 ranks: ppdit's Ulysses / diffusers', forwards per second (within 1.05x)",
        ratios(cp4["seconds"]["diffusers"], cp4["seconds"]["ppdit"]), 1 / 1.05, "higher")]),
        argv)
    if a.json:
        a.json.write_text(json.dumps({"seconds": res.seconds, "rounds": res.rounds,
                                      "v_first_over_v_last": vf, "sp_bytes_per_block": sp_bytes,
                                      "tp_bytes_per_block": tp_bytes,
                                      "diffusers_cp_seconds": cp["seconds"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
