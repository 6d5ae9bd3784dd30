"""Pictures of the toy model (``ppdit.toy``): a frame strip (one row per video, every other
frame), a nearest-neighbour enlargement so a 32 x 32 clip is visible in a GIF, and the training
loss curves."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure


def enlarge(clip: torch.Tensor, factor: int = 4) -> torch.Tensor:
    """(B, 3, T, H, W) -> (B, 3, T, H * factor, W * factor), nearest neighbour (crisp pixels)."""
    return F.interpolate(clip.float(), scale_factor=(1, factor, factor), mode="nearest")


def strip_figure(rows: list[torch.Tensor], titles: list[str], every: int = 2) -> Figure:
    """One row per clip ((3, T, H, W) in [-1, 1]), frames ``0, every, 2 every, ...``."""
    n = max(len(range(0, r.shape[1], every)) for r in rows)
    fig = Figure(figsize=(1.0 * n, 1.25 * len(rows) + 0.2))
    axes = fig.subplots(len(rows), n, squeeze=False)
    for r, (clip, title) in enumerate(zip(rows, titles, strict=True)):
        frames = ((clip.clamp(-1, 1) + 1) / 2).permute(1, 2, 3, 0)  # (T, H, W, 3)
        for c, ax in enumerate(axes[r]):
            ax.set_xticks([])
            ax.set_yticks([])
            t = c * every
            if t < len(frames):
                ax.imshow(frames[t].numpy(), interpolation="nearest")
                ax.set_xlabel(f"frame {t}", fontsize=7)
            else:
                ax.axis("off")
        axes[r][0].set_title(title, loc="left", fontsize=9)
    fig.tight_layout()
    return fig


def save_strip(rows: list[torch.Tensor], titles: list[str], path: Path, every: int = 2) -> Path:
    """``strip_figure`` as a PNG."""
    strip_figure(rows, titles, every).savefig(path, dpi=100)
    return path


def save_loss_plot(vae_losses: list[float], dit_losses: list[float], path: Path) -> Path:
    """Both training curves (per step and smoothed), log scale, as a PNG."""
    fig = Figure(figsize=(10, 3.6))
    axes = fig.subplots(1, 2)
    for ax, losses, title in ((axes[0], vae_losses, "VAE reconstruction"),
                              (axes[1], dit_losses, "DiT flow matching")):
        x = torch.tensor(losses)
        k = max(1, len(x) // 20)
        smooth = F.avg_pool1d(x.view(1, 1, -1), k, 1).flatten()
        ax.plot(range(len(x)), x, alpha=0.3, label="per step")
        ax.plot(range(k - 1, len(x)), smooth, label=f"mean of {k} steps")
        ax.set(yscale="log", xlabel="training step", ylabel="loss (MSE)", title=title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


__all__ = ["enlarge", "save_loss_plot", "save_strip", "strip_figure"]
