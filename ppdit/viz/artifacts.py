"""The files a job leaves behind: a timeline PNG, the video (imageio), a frame strip.

Figures here are ``matplotlib.figure.Figure`` objects saved directly (no ``pyplot``, no backend
switch), so calling them from a notebook or a library never changes the caller's matplotlib."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

from ppdit.runtime.observe.trace import Trace
from ppdit.viz.timeline import plot_busy, plot_timeline


def save_timeline(trace: Trace, path: Path, title: str, *, busy: bool = False) -> Path:
    """One lane per rank (plus, with ``busy``, each rank's busy share beside it) as a PNG."""
    fig = Figure(figsize=(13 if busy else 12, 1.4 + 0.6 * len(trace.ranks)))
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
    """(3, T, H, W) pixels in [-1, 1] (the VAE's output) -> (T, H, W, 3) uint8."""
    return ((clip.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 3, 0)


def pipeline_clip(video: torch.Tensor) -> torch.Tensor:
    """``WanPipeline(output_type="pt")``'s (1, F, 3, H, W) in [0, 1] -> (3, F, H, W) in [-1, 1],
    the VAE's own layout, which the writers here take."""
    return video[0].permute(1, 0, 2, 3) * 2 - 1


def write_video(frames: torch.Tensor, path: Path, fps: int) -> Path:
    """(T, H, W, 3) uint8 frames through imageio, to the path returned: H.264 MP4 when ``path``
    ends in ``.mp4`` and imageio's ffmpeg plugin is installed (else a GIF beside it), else a GIF."""
    import imageio.v2 as imageio

    images = list(frames.numpy())
    if path.suffix == ".mp4":
        try:
            import imageio_ffmpeg  # noqa: F401  (the plugin's binary; absent -> GIF)

            # macro_block_size=1: tiny videos are not multiples of 16 pixels.
            imageio.mimwrite(path, images, fps=fps, codec="libx264", macro_block_size=1)
            return path
        except (ImportError, RuntimeError, OSError):
            path = path.with_suffix(".gif")
    imageio.mimwrite(path, images, duration=1000 / fps, loop=0)
    return path


def save_gif(videos: dict[int, list[torch.Tensor]], path: Path, fps: int = 8) -> int:
    """Write every delivered pixel chunk, video after video, as one GIF; returns frame count."""
    clips = [to_uint8_frames(torch.cat(videos[v], dim=2)[0]) for v in sorted(videos)]
    if clips:
        write_video(torch.cat(clips), path, fps)
    return sum(len(c) for c in clips)


def enlarge(clip: torch.Tensor, factor: int = 4) -> torch.Tensor:
    """(B, 3, T, H, W) -> (B, 3, T, H * factor, W * factor), nearest neighbour (crisp pixels)."""
    return F.interpolate(clip.float(), scale_factor=(1, factor, factor), mode="nearest")


def draw_strip(fig: Figure, rows: list[torch.Tensor], titles: list[str], every: int = 2) -> Figure:
    """Into ``fig`` (a notebook passes ``plt.figure()``): one row per clip ((3, T, H, W) in
    [-1, 1]) titled above it, frames ``0, every, 2 every, ...`` labelled by index."""
    n = max(len(range(0, r.shape[1], every)) for r in rows)
    fig.set_size_inches(max(1.0 * n, 5.0), 1.35 * len(rows) + 0.2)
    fig.set_layout_engine("constrained")
    subfigs = fig.subfigures(len(rows), 1, squeeze=False)[:, 0]
    for sub, clip, title in zip(subfigs, rows, titles, strict=True):
        frames = to_uint8_frames(clip)
        sub.suptitle(title, x=0.01, ha="left", fontsize=9)
        for c, ax in enumerate(sub.subplots(1, n, squeeze=False)[0]):
            ax.set(xticks=[], yticks=[])
            t = c * every
            if t < len(frames):
                ax.imshow(frames[t].numpy(), interpolation="nearest")
                ax.set_xlabel(f"frame {t}", fontsize=7)
            else:
                ax.axis("off")
    return fig


def save_strip(rows: list[torch.Tensor], titles: list[str], path: Path, every: int = 2) -> Path:
    """``draw_strip`` on a figure of its own (no pyplot), as a PNG."""
    draw_strip(Figure(), rows, titles, every).savefig(path, dpi=100)
    return path
