"""Figures for the tensor-parallel lesson: the column/row split, bytes per block, graph breaks per
collective style, forward times. Plain matplotlib; each function returns its axes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Patch, Rectangle

from ppdit.parallel.tensor.comms import tp_comm_per_block
from ppdit.viz.spread import count_label, min_max_err

RANK_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52")
SHARED = "#9A9A9A"


def _box(ax, x, y, w, h, color, label, alpha=0.85, fontsize=8):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="black", lw=0.6,
                           alpha=alpha))
    pale = alpha < 0.7 or color == "white"  # white text on a washed-out box cannot be read
    ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=fontsize,
            color="black" if pale else "white")


def _arrow(ax, x0, y0, x1, y1, text="", color="black"):
    ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=9,
                                 color=color, lw=0.9))
    if text:
        ax.text((x0 + x1) / 2, (y0 + y1) / 2 + 0.12, text, ha="center", va="bottom",
                fontsize=7)


def draw_tp_split(tp: int = 2, ax=None):
    """The Megatron pair for ``tp`` ranks: x replicated -> column shard of W1 -> local slice
    -> row shard of W2 -> partial sums -> all-reduce -> the same y on every rank."""
    ax = ax or plt.subplots(figsize=(10.5, 1.1 + 1.25 * tp))[1]
    lane = 1.25
    for r in range(tp):
        c = RANK_COLORS[r % len(RANK_COLORS)]
        y = (tp - 1 - r) * lane
        ax.text(-0.15, y + 0.4, f"rank {r}", ha="right", va="center", fontsize=9, color=c)
        _box(ax, 0.0, y, 1.1, 0.8, SHARED, "x (B,S,D)\nreplicated")
        _arrow(ax, 1.15, y + 0.4, 1.75, y + 0.4, f"W1 shard {r}")
        _box(ax, 1.8, y, 1.5, 0.8, c, f"x W1[{r}]ᵀ\n(B,S,F/{tp})")
        _arrow(ax, 3.35, y + 0.4, 3.85, y + 0.4, "GELU")
        _box(ax, 3.9, y, 1.5, 0.8, c, f"y{r} (B,S,F/{tp})\nlocal slice")
        _arrow(ax, 5.45, y + 0.4, 6.05, y + 0.4, f"W2 shard {r}")
        _box(ax, 6.1, y, 1.5, 0.8, c, f"partial{r}\n(B,S,D)", alpha=0.55)
        _arrow(ax, 7.65, y + 0.4, 8.35, y + 0.4)
        _box(ax, 8.4, y, 1.4, 0.8, SHARED, "y (B,S,D)\nsame on all")
    top = (tp - 1) * lane + 0.8
    # under the arrows (zorder 0): the partial -> y arrows run through the all-reduce
    ax.add_patch(Rectangle((7.68, -0.1), 0.64, top + 0.2, facecolor="#F2D7A6",
                           edgecolor="#B8860B", lw=0.8, zorder=0))
    ax.text(8.0, top / 2, "all-\nreduce\n(sum)", ha="center", va="center", fontsize=8)
    ax.text(2.55, top + 0.22, "column-parallel: W1's output features split,\nno communication",
            ha="center", fontsize=8)
    ax.text(6.55, top + 0.22, "row-parallel: W2's input features split,\none all-reduce",
            ha="center", fontsize=8)
    ax.set(xlim=(-0.9, 10.0), ylim=(-0.3, top + 0.75))
    ax.axis("off")
    ax.set_title(f"Megatron column/row split over {tp} ranks (FFN shown; in attention, "
                 "heads take GELU's place)", loc="left", fontsize=10)
    ax.figure.tight_layout()
    return ax


def plot_comm_volume(dims: Sequence[int], tps: Sequence[int], *, tokens: int, text_len: int,
                     bytes_per_element: int = 2, marks: Mapping[str, int] | None = None, ax=None):
    """Bytes each rank sends per block (ring all-reduce) against hidden size D, one line per TP
    degree; ``marks`` labels named widths (presets) on the x axis."""
    ax = ax or plt.subplots(figsize=(6.5, 3.6))[1]
    for i, tp in enumerate(tps):
        mb = [tp_comm_per_block(batch=1, tokens=tokens, text_len=text_len, dim=d, tp=tp,
                                bytes_per_element=bytes_per_element).wire_bytes_per_rank / 1e6
              for d in dims]
        ax.plot(dims, mb, marker="o", ms=3, color=RANK_COLORS[i % 4], label=f"tp={tp}")
    for d in (marks := marks or {}).values():
        ax.axvline(d, color=SHARED, lw=0.7, ls=":")
    ax.set_xscale("log", base=2)
    ax.secondary_xaxis("top").set_xticks(list(marks.values()), list(marks), fontsize=8)
    ax.set(yscale="log", xlabel="hidden size D (features, log₂ scale)",
           ylabel="MB sent per rank per block (log scale)")
    ax.set_title(f"TP traffic per block, S={tokens:,} tokens, "
                 f"{8 * bytes_per_element}-bit activations", loc="left", fontsize=10)
    ax.legend(fontsize=8)
    ax.figure.tight_layout()
    return ax


def plot_graph_breaks(breaks: Mapping[str, tuple[int, int | None]], ax=None):
    """Grouped bars: graph breaks of one block and of the whole forward, per collective style
    (a forward count of ``None``, not traced, draws the block's bars alone)."""
    ax = ax or plt.subplots(figsize=(6.5, 3.0))[1]
    names = list(breaks)
    xs = range(len(names))
    block, forward = [breaks[n][0] for n in names], [breaks[n][1] for n in names]
    both = all(f is not None for f in forward)
    shift, width = (0.2, 0.4) if both else (0.0, 0.6)
    series = [("one block", block, -shift)] + ([("whole forward", forward, shift)] if both else [])
    for i, (label, counts, dx) in enumerate(series):
        ax.bar([x + dx for x in xs], counts, width=width, color=RANK_COLORS[i], label=label)
        for x, n in enumerate(counts):
            ax.text(x + dx, n, str(n), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(xs), names)
    ax.set(ylabel="graph breaks",
           ylim=(0, max(block + [f for f in forward if f is not None] + [1]) * 1.2))
    ax.set_title("Graph breaks per collective style (torch._dynamo.explain)", loc="left",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.figure.tight_layout()
    return ax


def plot_forward_times(times_ms: Mapping[str, float], ax=None, title: str = "", *,
                       runs_ms: Mapping[str, Sequence[float]] | None = None):
    """Horizontal bars: median forward time per variant. ``runs_ms`` (every round's time, per
    variant) adds min-max bars, because rounds on a shared machine spread widely enough to
    reorder the medians; variants whose name says "compiled" get their own colour."""
    ax = ax or plt.subplots(figsize=(6.5, 0.5 + 0.38 * len(times_ms)))[1]
    names, med = list(times_ms), list(times_ms.values())
    compiled = ["compiled" in n for n in names]
    colors = [RANK_COLORS[1] if c else RANK_COLORS[0] for c in compiled]
    runs = [(runs_ms or {}).get(n, ()) for n in names]
    xerr = min_max_err(med, runs) if runs_ms else None
    hi = [m + up for m, up in zip(med, xerr[1], strict=True)] if xerr else med
    ax.barh(names, med, color=colors, xerr=xerr, capsize=3,
            error_kw={"elinewidth": 0.9, "ecolor": "black"})
    for i, (m, end) in enumerate(zip(med, hi, strict=True)):
        ax.text(end, i, f" {m:.1f} ms", va="center", fontsize=8)  # past the error bar
    ax.invert_yaxis()
    ax.set_xlabel("median forward time (ms)" + (f"; bars: min–max of {count_label(runs, 'round')}"
                                                if runs_ms else ""))
    ax.set_xlim(0, max(hi) * 1.25)
    if any(compiled) and not all(compiled):  # one legend entry per colour drawn
        ax.legend(handles=[Patch(color=RANK_COLORS[0], label="eager"),
                           Patch(color=RANK_COLORS[1], label="torch.compile")],
                  fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    if title:
        ax.set_title(title, loc="left", fontsize=10)
    ax.figure.tight_layout()
    return ax
