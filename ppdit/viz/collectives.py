"""Pictures of lesson 04: every primitive as (ranks × chunks) before and after, the α-β fit of a
measured link, and where a tree all-reduce beats a ring.

The functions draw what they are given (results of live ranks, fitted numbers, formula
values); nothing here computes a cost."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

SUM_COLOR = "#555555"  # a value that is no rank's own: a reduction
EMPTY_COLOR = "#F2F2F2"  # nothing (defined) there


def _cell_color(value: int | None, origin: Mapping[int, int]):
    if value is None:
        return EMPTY_COLOR
    if value in origin:
        return plt.get_cmap("tab10")(origin[value])
    return SUM_COLOR


def plot_primitives(results: Sequence[Mapping[str, tuple[list, list]]],
                    origin: Mapping[int, int], names: Sequence[str], per_row: int = 3):
    """One pair of (rank × chunk) grids per primitive, ``results[r][name] = (before, after)``:
    every cell labelled with its value and coloured by its rank (``origin``: input value -> rank;
    dark grey: a sum over ranks; light: nothing defined there)."""
    p, rows = len(results), -(-len(names) // per_row)
    fig, axes = plt.subplots(rows, 2 * per_row, figsize=(2.2 * 2 * per_row, 2.5 * rows + 0.4))
    axes = np.atleast_2d(axes)
    for k, name in enumerate(names):
        for side, when in enumerate(("before", "after")):
            ax = axes[k // per_row, 2 * (k % per_row) + side]
            for r in range(p):
                for c, value in enumerate(results[r][name][side]):
                    colour = _cell_color(value, origin)
                    ax.add_patch(plt.Rectangle((c, r), 0.94, 0.94, color=colour))
                    ax.text(c + 0.47, r + 0.47, "·" if value is None else str(value),
                            ha="center", va="center", fontsize=7,
                            color="white" if colour == SUM_COLOR else "black")
            ax.set(xlim=(0, p), ylim=(p, 0))  # rank 0 on top
            ax.set_xticks([c + 0.47 for c in range(p)], [str(c) for c in range(p)], fontsize=7)
            ax.set_yticks([r + 0.47 for r in range(p)],
                          [f"rank {r}" if side == 0 else "" for r in range(p)], fontsize=7)
            ax.tick_params(length=0)
            ax.set_xlabel("chunk", fontsize=7)
            ax.spines[:].set_visible(False)
            ax.set_title(f"{name}: {when}" if side == 0 else "→ after", fontsize=9,
                         loc="left")
    for ax in axes.flat[2 * len(names):]:
        ax.set_visible(False)
    fig.suptitle(f"The primitives on {p} ranks (colour: the rank a value came from; dark grey: "
                 "a sum over ranks; light: nothing defined)", fontsize=9)
    fig.tight_layout()
    return fig


def plot_alpha_beta(nbytes: Sequence[float], measured: Mapping[str, Sequence[Sequence[float]]],
                    fits: Mapping[str, tuple[float, float]], ax=None, title: str | None = None):
    """Time per operation against message size, log-log: the medians of each series with their
    min-max over rounds, each series' fitted α + n/β, and, for the first series, its two
    asymptotes (α, and n/β) meeting at n = α β."""
    ax = ax or plt.subplots(figsize=(7.5, 4.6))[1]
    n = np.asarray(nbytes, dtype=float)
    x = np.logspace(np.log10(n.min()) - 0.3, np.log10(n.max()) + 0.3, 200)
    colours, lowest = ["#4C72B0", "#8172B3", "#55A868"], float("inf")
    for (name, rounds), colour in zip(measured.items(), colours, strict=False):
        arr = np.asarray(rounds, dtype=float) * 1e6  # (sizes, rounds), us
        med = np.median(arr, axis=1)
        err = np.vstack([med - arr.min(axis=1), arr.max(axis=1) - med])
        lowest = min(lowest, arr.min())
        ax.errorbar(n, med, yerr=err, fmt="o", color=colour, ms=4, capsize=2,
                    label=f"{name}: median, min-max over rounds")
        alpha, beta = fits[name]
        ax.plot(x, (alpha + x / beta) * 1e6, color=colour, lw=1.2,
                label=f"{name} fit: {alpha * 1e6:,.0f} us + n / {beta / 1e9:,.2f} GB/s")
    first, (alpha, beta) = next(iter(fits.items()))
    cross = alpha * beta
    ax.axhline(alpha * 1e6, color="gray", ls=":", lw=1,
               label=f"{first}: its asymptotes t = α and t = n/β")
    steep = x[x / beta >= alpha / 4]  # the n/β asymptote only where it is near the data
    ax.plot(steep, steep / beta * 1e6, color="gray", ls=":", lw=1)
    ax.axvline(cross, color="#C44E52", ls="--", lw=1,
               label="n = αβ: latency-bound left of it, bandwidth-bound right")
    ax.set(xscale="log", yscale="log", ylim=(min(lowest, alpha * 1e6) / 2, None))
    top = ax.get_ylim()[1]
    right_half = np.log(cross) > np.log(n.min() * n.max()) / 2  # label on the roomier side
    ax.text(cross * (0.87 if right_half else 1.15), top / 1.3,
            f"n = αβ = {cross / 1e3:,.0f} kB\n({first})", color="#C44E52", fontsize=7,
            va="top", ha="right" if right_half else "left")
    ax.set(xlabel="message size n (bytes, log scale)",
           ylabel="time per operation (us, log scale)")
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    ax.set_title(title or "A link measured: t = α + n/β", fontsize=10)
    return ax


def plot_tree_over_ring(curves: Mapping[str, Mapping[int, tuple[Sequence[float],
                                                                 Sequence[float], float]]]):
    """One panel per link: tree time / ring time against the all-reduce size, one line per
    rank count; below 1 the tree is faster. ``curves[link][p] = (sizes, ratios, crossover)``;
    the crossover (where the ratio is 1) is marked."""
    fig, axes = plt.subplots(1, len(curves), figsize=(4.2 * len(curves), 3.6), sharey=True)
    axes, colours = np.atleast_1d(axes), plt.get_cmap("viridis")
    for ax, (link, by_p) in zip(axes, curves.items(), strict=True):
        for j, (p, (sizes, ratios, cross)) in enumerate(by_p.items()):
            colour = colours(j / max(1, len(by_p) - 1) * 0.85)
            ax.plot(sizes, ratios, color=colour, label=f"p = {p}")
            if sizes[0] < cross < sizes[-1]:
                ax.plot([cross], [1.0], "o", color=colour, ms=5)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel="all-reduce size n (bytes, log scale)")
        ax.set_title(link, fontsize=9)
        ax.grid(True, alpha=0.3, which="both")
    # in the label, not in the panel: the p = 512 plateau runs along the bottom of every panel
    axes[0].set_ylabel("tree time / ring time (log scale)\nbelow 1: tree faster")
    axes[-1].legend(fontsize=7, loc="lower right")
    fig.suptitle("Double binary tree against ring all-reduce in the α-β model "
                 "(dots: the crossover)", fontsize=10)
    fig.tight_layout()
    return fig
