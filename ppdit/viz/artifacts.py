"""The files a job leaves behind: a timeline PNG, the video, drawn without touching global state.

Figures here are ``matplotlib.figure.Figure`` objects saved directly (no ``pyplot``, no backend
switch), so calling them from a notebook or a library never changes the caller's matplotlib.
"""

from __future__ import annotations

from pathlib import Path

import torch
from matplotlib.figure import Figure
from PIL import Image

from ppdit.runtime.trace import Trace
from ppdit.viz.timeline import plot_busy, plot_timeline


def save_timeline(trace: Trace, path: Path, title: str, *, busy: bool = False) -> Path:
    """One lane per rank (plus, with ``busy``, each rank's busy share beside it) as a PNG."""
    lanes = len(trace.ranks)
    fig = Figure(figsize=(13 if busy else 12, 1.4 + 0.6 * lanes))
    if busy:
        ax, bx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [5, 1]})
        plot_busy(trace, ax=bx)
    else:
        ax = fig.subplots()
    plot_timeline(trace, ax=ax, title=title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def to_uint8_frames(clip: torch.Tensor) -> torch.Tensor:
    """(3, T, H, W) pixels in [-1, 1] -> (T, H, W, 3) uint8."""
    return ((clip.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 3, 0)


def save_gif(videos: dict[int, list[torch.Tensor]], path: Path, fps: int = 8) -> int:
    """Write every delivered pixel chunk, video after video, as one GIF; returns frame count."""
    images = []
    for video in sorted(videos):
        frames = to_uint8_frames(torch.cat(videos[video], dim=2)[0])
        images += [Image.fromarray(f.numpy()) for f in frames]
    if images:
        images[0].save(path, save_all=True, append_images=images[1:], duration=1000 // fps,
                       loop=0)
    return len(images)


__all__ = ["save_gif", "save_timeline", "to_uint8_frames"]
