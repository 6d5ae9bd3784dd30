"""``python -m ppdit demo``: the streaming system end to end, and its artifacts.

Rank 0 (controller + streaming VAE) and a tensor-parallel mesh stream a video chunk by chunk
with a hard cut in the middle (a new prompt and seed: the old video's in-flight chunks are
dropped, caches reset). Written to the output folder: ``video.gif`` (the decoded frames),
``timeline.png``, ``trace.json`` (Perfetto) and ``summary.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ppdit.runtime.launch import in_torchrun


def run_demo(out: Path, *, chunks: int = 6, cut_at: int | None = 3, tp: int = 2,
             num_steps: int = 4) -> int:
    """Run the system once and write the artifacts; returns a process exit code."""
    from ppdit.serve.config import BringupConfig
    from ppdit.serve.system import BringupResult, run_bringup

    cfg = BringupConfig(phase="pp1" if tp > 1 else "recompute", chunks=chunks, cut_at=cut_at,
                        tp=tp, num_steps=num_steps)
    if in_torchrun():
        result = _under_torchrun(cfg)
        if result is None:
            return 0
    else:
        print(f"ppdit demo: streaming {chunks} chunks (hard cut before chunk {cut_at}) from a "
              f"{tp}-rank tensor-parallel mesh to a controller with a streaming VAE; spawning "
              f"{cfg.world_size} ranks...", flush=True)
        result = run_bringup(cfg)
    assert isinstance(result, BringupResult)
    write_artifacts(result, out)
    return 0


def _under_torchrun(cfg):
    from ppdit.runtime.launch import run_under_torchrun
    from ppdit.runtime.trace import merge
    from ppdit.serve.system import BringupResult, bringup_worker, setup_bringup

    per_rank = run_under_torchrun(bringup_worker, args=((cfg,), 1), setup=setup_bringup)
    if per_rank is None:
        return None
    return BringupResult(cfg, per_rank[0][0][0][0], [r[0][0][0] for r in per_rank[1:]],
                         merge([r[0][0][1] for r in per_rank]))


def write_artifacts(result, out: Path) -> None:
    """video.gif, timeline.png, trace.json, summary.json; then say where they are."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ppdit.viz import plot_timeline

    out.mkdir(parents=True, exist_ok=True)
    frames = save_gif(result.controller.video, out / "video.gif")
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.6 * len(result.trace.ranks)))
    plot_timeline(result.trace, ax=ax, title=f"bring-up phase {result.cfg.phase}: rank 0 "
                                             "controller + decode, ranks 1.. the mesh")
    fig.tight_layout()
    fig.savefig(out / "timeline.png", dpi=110)
    result.trace.save_chrome(out / "trace.json")
    summary = {**result.summary(), "frames_written": frames}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"{summary['fps']:.1f} frames/s, first frame after "
          f"{summary['time_to_first_frame_s'] * 1e3:.0f} ms, {summary['chunks_delivered']} "
          f"chunks delivered, {summary['dropped_stale_results']} stale results dropped, "
          f"max queue depth {summary['max_queue_depth']}")
    print(f"wrote {out / 'video.gif'}, {out / 'timeline.png'}, {out / 'trace.json'} (open in "
          f"https://ui.perfetto.dev) and {out / 'summary.json'}")


def save_gif(videos: dict[int, list[torch.Tensor]], path: Path, fps: int = 8) -> int:
    """Write every delivered pixel chunk, video after video, as one GIF; returns frame count."""
    from PIL import Image

    images = []
    for video in sorted(videos):
        clip = torch.cat(videos[video], dim=2)[0]  # (3, T, H, W) in [-1, 1]
        pixels = ((clip.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
        images += [Image.fromarray(pixels[:, t].permute(1, 2, 0).numpy())
                   for t in range(pixels.shape[1])]
    if images:
        images[0].save(path, save_all=True, append_images=images[1:], duration=1000 // fps,
                       loop=0)
    return len(images)
