"""Pictures of the toy model's training (``ppdit.toy``): the loss curves. Its frame strips
and enlarged GIFs are the shared ones in ``ppdit.viz.artifacts``."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure


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
