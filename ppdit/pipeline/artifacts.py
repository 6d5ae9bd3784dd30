"""What ``ppdit generate`` leaves behind: the video (MP4 through imageio's ffmpeg plugin, a GIF
when no encoder is installed), a strip of its frames as a PNG, and the JSON summary."""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image


def to_uint8(video: torch.Tensor) -> torch.Tensor:
    """(1, F, 3, H, W) in [0, 1] (``WanPipeline(output_type="pt")``) -> (F, H, W, 3) uint8."""
    return (video[0].clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1)


def save_video(video: torch.Tensor, out: Path, fps: int = 16) -> Path:
    """``out/video.mp4`` (H.264 via imageio-ffmpeg; Wan 2.1 runs at 16 fps), or
    ``out/video.gif`` if no ffmpeg encoder can be found. Returns the path written."""
    import imageio.v2 as imageio

    frames = list(to_uint8(video).numpy())
    try:
        import imageio_ffmpeg  # noqa: F401  (the plugin's binary; absent -> GIF)

        path = out / "video.mp4"
        # macro_block_size=1: tiny test videos are not multiples of 16 pixels.
        imageio.mimwrite(path, frames, fps=fps, codec="libx264", macro_block_size=1)
    except (ImportError, RuntimeError, OSError):
        path = out / "video.gif"
        imageio.mimwrite(path, frames, duration=1000 / fps, loop=0)
    return path


def save_strip(video: torch.Tensor, path: Path, max_frames: int = 9) -> Path:
    """The first ``max_frames`` frames side by side in one PNG (what a README shows)."""
    frames = to_uint8(video)[:max_frames]
    strip = torch.cat(list(frames), dim=1)  # (H, F*W, 3)
    Image.fromarray(strip.numpy()).save(path)
    return path


__all__ = ["save_strip", "save_video", "to_uint8"]
