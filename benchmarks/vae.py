"""Streaming vs full VAE decode, measured side by side in one run: time to first frame, total
time and peak memory, per latent length F and per chunk size.

    python benchmarks/vae.py                   # tiny VAE, F = 5, 9, 21 (~1 min on 2 CPU cores)
    python benchmarks/vae.py --quick           # F = 5, 9 (~30 s)
    python benchmarks/vae.py --checkpoint PATH --hw 60 104   # the real Wan 2.1 VAE, on a GPU

Target (issue 5): for F >= 5 latent frames, streaming's time to first frame <= 1.2 / F of the
full decode's time in the same repeat — the first frame needs only the first latent frame's
share of the work (judged per repeat: ``record.py``'s rule).

Full decode returns every frame at once, so its time to first frame is its total time. Peak
memory is the most bytes allocated at once during the decode (GPU: max_memory_allocated; CPU:
live tensor bytes, see ppdit.runtime.observe.memory), measured in a separate untimed run. Modes are
interleaved repeat by repeat; every time is a median.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import torch
from record import Target, keep, show

from ppdit.analysis.vae_decode import format_table, measure_decode, ttff_target
from ppdit.runtime.device import Placement
from ppdit.runtime.rounds import ratios
from ppdit.vae.presets import build_vae


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="F = 5, 9 and 2 repeats")
    ap.add_argument("--frames", type=int, nargs="+", help="latent lengths F (default 5 9 21)")
    ap.add_argument("--chunks", type=int, nargs="+", default=[1, 2, 4],
                    help="latent frames per push after the first")
    ap.add_argument("--hw", type=int, nargs=2, default=[16, 16], help="latent H W")
    ap.add_argument("--repeats", type=int, help="timed repeats per mode (default 5)")
    ap.add_argument("--preset", default="tiny", help="VAE preset (ignored with --checkpoint)")
    ap.add_argument("--checkpoint", type=Path, help="local Wan 2.1 VAE or pipeline folder")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    a = ap.parse_args(argv)
    frames = a.frames or ([5, 9] if a.quick else [5, 9, 21])
    repeats = a.repeats or 5  # the fewest rounds a verdict's interval needs
    torch.set_num_threads(a.threads)
    cuda = torch.cuda.is_available()
    placement = Placement(torch.device("cuda", 0) if cuda else torch.device("cpu"),
                          "nccl" if cuda else "gloo")
    vae = build_vae(a.preset, seed=0, checkpoint=a.checkpoint, device=placement.device)
    z_dim = vae.config.z_dim
    rows = []
    for f in frames:
        g = torch.Generator().manual_seed(f)
        latents = torch.randn(1, z_dim, f, *a.hw, generator=g).to(placement.device)
        rows += measure_decode(vae, latents, a.chunks, repeats=repeats, placement=placement)
    where = torch.cuda.get_device_name(0) if cuda else f"CPU, {a.threads} thread(s)"
    name = a.checkpoint or f"preset {a.preset!r}"
    print(f"streaming vs full decode: VAE {name}, latent H x W = {a.hw[0]} x {a.hw[1]}, "
          f"{where}, median of {repeats}")
    print(format_table(rows))
    checked = [r for r in rows if r.chunk_frames is not None and r.latent_frames >= 5]
    full = {r.latent_frames: r for r in rows if r.chunk_frames is None}
    print("targets: ttff <= 1.2 / F x the full decode (same repeat), F >= 5, every chunk size")
    keep("vae", show([Target(f"F={r.latent_frames}, {r.mode}: ttff / full decode",
                             ratios(r.ttff_runs, full[r.latent_frames].total_runs),
                             ttff_target(r.latent_frames), digits=3) for r in checked]), argv)
    if a.json:
        a.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
