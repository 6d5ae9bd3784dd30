"""Pictures for the streaming-VAE lesson: the causal cache, frame strips, decode measurements.

Plain matplotlib; every picture takes optional axes (``ax`` or ``axes``) and returns them."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import FancyArrowPatch, Rectangle

from ppdit.analysis.vae_decode import DecodeMeasurement
from ppdit.vae.streaming import StreamingDecoder, output_frames
from ppdit.viz.spread import count_label, min_max_err

_PUSH_COLORS = plt.cm.tab10.colors


def draw_frame_arithmetic(pushes: Sequence[int] = (1, 2, 1), factor: int = 4, ax=None):
    """Latent frames (top) and the pixel frames each push returns (bottom), coloured by push:
    the first latent frame gives 1 pixel frame, every later one ``factor``."""
    ax = ax or plt.subplots(figsize=(9, 2.2))[1]
    latent_frames = sum(pushes)
    total = output_frames(latent_frames, factor)
    z, x = 0, 0
    for p, n in enumerate(pushes):
        color = _PUSH_COLORS[p % 10]
        for _ in range(n):
            outs = 1 if z == 0 else factor
            zx = (z + 0.5) * total / latent_frames  # spread the latent row over the same width
            ax.add_patch(Rectangle((zx - 0.45, 1.0), 0.9, 0.5, color=color))
            ax.text(zx, 1.25, f"z{z}", ha="center", va="center", color="white", fontsize=8)
            for j in range(outs):
                ax.add_patch(Rectangle((x + j + 0.05, 0.0), 0.9, 0.5, color=color, alpha=0.75))
                ax.plot([zx, x + j + 0.5], [1.0, 0.5], color=color, lw=0.6)
            x, z = x + outs, z + 1
    ax.text(-0.3, 1.25, "latent", ha="right", va="center", fontsize=9)
    ax.text(-0.3, 0.25, "pixels", ha="right", va="center", fontsize=9)
    ax.set(xlim=(-2.5, total + 0.5), ylim=(-0.2, 1.7))
    ax.axis("off")
    ax.set_title(f"pushes of {list(pushes)} latent frames -> {total} = 1 + {factor}·"
                 f"({latent_frames} − 1) pixel frames (colour = push)", loc="left", fontsize=9)
    return ax


def draw_causal_conv(chunk: int = 2, ax=None):
    """One causal conv (time kernel 3) on a push of ``chunk`` frames: each output frame reads
    itself and the two frames before it; the two before the chunk come from the cache, and
    the chunk's last two frames become the cache for the next push."""
    ax = ax or plt.subplots(figsize=(6, 2.4))[1]
    cache, cur = 2, chunk
    for i in range(cache + cur):
        cached = i < cache
        ax.add_patch(Rectangle((i, 1.2), 0.9, 0.5, facecolor="#C0C0C0" if cached else "#8172B3",
                               hatch="//" if cached else None, edgecolor="white"))
        ax.text(i + 0.45, 1.45, f"t{i - cache}" if cached else f"t+{i - cache}", ha="center",
                va="center", fontsize=8, color="black" if cached else "white")
    for j in range(cur):
        ax.add_patch(Rectangle((cache + j, 0.0), 0.9, 0.5, facecolor="#4C72B0"))
        ax.text(cache + j + 0.45, 0.25, f"out t+{j}", ha="center", va="center", fontsize=7,
                color="white")
        for d in range(3):  # the kernel's three taps in time
            ax.add_artist(FancyArrowPatch((cache + j - d + 0.45, 1.2), (cache + j + 0.45, 0.5),
                                          arrowstyle="-", color="grey", lw=0.6))
    ax.add_patch(Rectangle((cache + cur - 2 - 0.05, 1.15), 2.0, 0.6, fill=False, ls="--",
                           edgecolor="black"))
    ax.text(cache + cur + 0.1, 1.45, "kept as the\nnext cache", va="center", fontsize=8)
    ax.text(1, 1.95, "from the cache", ha="center", fontsize=8)
    ax.text(cache + cur / 2, 1.95, "this push", ha="center", fontsize=8)
    ax.set(xlim=(-0.3, cache + cur + 1.8), ylim=(-0.2, 2.2))
    ax.axis("off")
    ax.set_title(f"one causal conv, push of {chunk} frames", loc="left", fontsize=9)
    return ax


def plot_cache_slots(decoder: StreamingDecoder, ax=None):
    """Bytes held by each cache slot (one per causal conv, in decoder order) after a push."""
    ax = ax or plt.subplots(figsize=(6, 2.4))[1]
    sizes = [b / 2**10 for b in decoder.cache_nbytes()]
    ax.bar(range(len(sizes)), sizes, color="#8172B3")
    ax.set(xlabel="cache slot (causal conv, input side -> pixel side)", ylabel="KiB")
    ax.set_title(f"{len(sizes)} slots, {sum(sizes):,.0f} KiB in all", loc="left", fontsize=9)
    return ax


def to_images(video: torch.Tensor, stretch: bool = False) -> torch.Tensor:
    """(1, 3, T, H, W) in [-1, 1] -> (T, H, W, 3) in [0, 1], for ``imshow``. ``stretch`` maps
    the video's own min..max to 0..1 (random weights decode to low-contrast pixels)."""
    v = video[0].permute(1, 2, 3, 0).float().cpu()  # (T, H, W, 3)
    if stretch:
        return (v - v.min()) / (v.max() - v.min()).clamp_min(1e-12)
    return ((v + 1) / 2).clamp(0, 1)


def frame_strip(video: torch.Tensor, frames: Sequence[int] | None = None, axes=None,
                title: str | None = None, stretch: bool = True):
    """Show some frames of a decoded video side by side (default: 8, evenly spaced)."""
    images = to_images(video, stretch)
    t = images.shape[0]
    frames = list(frames) if frames is not None else sorted({round(i * (t - 1) / 7)
                                                            for i in range(8)})
    if axes is None:
        _, axes = plt.subplots(1, len(frames), figsize=(1.3 * len(frames), 1.6))
    for ax, f in zip(axes, frames, strict=True):
        ax.imshow(images[f].numpy())
        ax.set_title(f"frame {f}", fontsize=8)
        ax.axis("off")
    if title:
        axes[0].figure.suptitle(title, fontsize=9, x=0.02, ha="left")
    return axes


def plot_decode_measurements(rows: Sequence[DecodeMeasurement], axes=None):
    """Per latent length F and mode: time to first frame (log scale), total time, peak memory.
    Times are medians with min-max bars over each row's repeats (on a shared CPU they spread
    enough to change which mode looks faster); peak memory, from one untimed run, has no bars."""
    axes = plt.subplots(1, 3, figsize=(12, 3))[1] if axes is None else axes
    lengths = sorted({r.latent_frames for r in rows})
    modes = list(dict.fromkeys(r.mode for r in rows))
    width = 0.8 / len(modes)
    panels = [("time to first frame", "ms (log scale)", lambda r: r.ttff_s * 1e3,
               lambda r: [t * 1e3 for t in r.ttff_runs]),
              ("total time", "ms", lambda r: r.total_s * 1e3,
               lambda r: [t * 1e3 for t in r.total_runs]),
              ("peak memory", "MiB", lambda r: r.peak_bytes / 2**20, None)]
    for i, mode in enumerate(modes):
        by_length = {r.latent_frames: r for r in rows if r.mode == mode}
        mine = [by_length[f] for f in lengths]
        xs = [j + i * width for j in range(len(lengths))]
        for ax, (_, _, value, runs) in zip(axes, panels, strict=True):
            heights = [value(r) for r in mine]
            repeats = [runs(r) for r in mine] if runs else []
            yerr = min_max_err(heights, repeats) if any(repeats) else None
            ax.bar(xs, heights, width, color=_PUSH_COLORS[i % 10], label=mode, yerr=yerr,
                   capsize=3, error_kw={"elinewidth": 0.9, "ecolor": "black"})
    for ax, (title, unit, _, runs) in zip(axes, panels, strict=True):
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(lengths))],
                      [f"F={f}" for f in lengths])
        ax.set(xlabel="latent frames", ylabel=unit)
        repeats = [runs(r) for r in rows] if runs else []
        note = ("one untimed run" if not runs else "median" if not any(repeats) else
                f"median, bars min–max of {count_label(repeats, 'repeat')}")
        ax.set_title(f"{title}\n{note}", loc="left", fontsize=9)
    axes[0].set_yscale("log")
    # outside the last panel: inside, it would hide the tallest bars
    axes[2].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), title="decode",
                   title_fontsize=8)
    return axes
