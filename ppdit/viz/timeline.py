"""Pictures of what the ranks did: timelines (one lane per rank) and busy/idle bars.

Plain matplotlib, so the figures land in notebooks, in the book, and as PNGs from the CLI.
"""

from __future__ import annotations

from itertools import groupby

import matplotlib.pyplot as plt

from ppdit.analysis.trace_stats import busy_fractions
from ppdit.runtime.trace import Span, Trace

KIND_COLORS = {
    "compute": "#4C72B0",
    "send": "#DD8452",
    "recv": "#55A868",
    "wait": "#C0C0C0",
    "decode": "#8172B3",
    "boot": "#937860",
}
_SHADES = (1.0, 0.65)  # alternate requests on a lane so neighbours stay distinguishable


def plot_timeline(trace: Trace, ax=None, title: str | None = None, label: bool = True,
                  kinds: tuple[str, ...] | None = None):
    """Draw one horizontal lane per rank; spans coloured by kind, compute labelled by request.

    Consecutive compute spans of one request are merged into one labelled block, so a stage
    that runs 14 steps of request 3 shows one "r3" box, not 14 slivers.
    """
    ax = ax or plt.subplots(figsize=(10, 0.6 + 0.55 * max(1, len(trace.ranks))))[1]
    for lane, rank in enumerate(trace.ranks):
        spans = [s for s in trace.select(rank=rank) if kinds is None or s.kind in kinds]
        _draw_lane(ax, lane, spans, label)
    ax.set_yticks(range(len(trace.ranks)), [f"rank {r}" for r in trace.ranks])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_xlim(0, trace.makespan_s * 1e3 * 1.01 or 1)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for k, c in KIND_COLORS.items()
               if any(s.kind == k for s in trace.spans)]
    names = [k for k in KIND_COLORS if any(s.kind == k for s in trace.spans)]
    ax.legend(handles, names, loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=8,
              ncol=len(names), frameon=False, borderaxespad=0.1)
    if title:
        ax.set_title(title, loc="left")
    return ax


def _draw_lane(ax, lane: int, spans: list[Span], label: bool) -> None:
    blocks = _merge_compute(spans)
    for i, (kind, name, start, end) in enumerate(blocks):
        color = KIND_COLORS.get(kind, "#999999")
        alpha = _SHADES[i % 2] if kind == "compute" else 0.9
        height = 0.8 if kind != "send" else 0.3  # sends overlap compute: draw them thin
        y = lane if kind != "send" else lane + 0.25
        ax.barh(y, (end - start) / 1e6, left=start / 1e6, height=height, color=color,
                alpha=alpha, edgecolor="white", linewidth=0.3,
                zorder=3 if kind == "send" else 2)  # in flight: drawn over what it overlaps
        if label and kind == "compute" and name:
            ax.text((start + end) / 2e6, lane, name, ha="center", va="center", fontsize=7,
                    color="white", clip_on=True)


def _merge_compute(spans: list[Span]) -> list[tuple[str, str, int, int]]:
    """(kind, label, start, end) blocks: runs of same-named compute spans become one block."""
    out = []
    ordered = sorted(spans, key=lambda s: s.start_ns)
    for (kind, name), group in groupby(ordered, key=lambda s: (s.kind, s.name)):
        g = list(group)
        if kind == "compute":
            out.append((kind, name, g[0].start_ns, g[-1].end_ns))
        else:
            out += [(s.kind, s.name, s.start_ns, s.end_ns) for s in g]
    return out


def plot_busy(trace: Trace, ax=None, title: str | None = None):
    """Stacked bars per rank: busy (compute) vs idle share of the whole run."""
    ax = ax or plt.subplots(figsize=(4.5, 3))[1]
    busy = busy_fractions(trace)
    ranks = list(busy)
    ax.bar([str(r) for r in ranks], [busy[r] for r in ranks], color=KIND_COLORS["compute"],
           label="busy")
    ax.bar([str(r) for r in ranks], [1 - busy[r] for r in ranks], bottom=[busy[r] for r in ranks],
           color=KIND_COLORS["wait"], label="idle")
    for i, r in enumerate(ranks):
        ax.text(i, busy[r] / 2, f"{busy[r]:.0%}", ha="center", va="center", color="white")
    ax.set_xlabel("rank")
    ax.set_ylabel("share of run")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8, loc="upper right")
    if title:
        ax.set_title(title)
    return ax


def plot_counters(trace: Trace, names: tuple[str, ...] | None = None, ax=None,
                  title: str | None = None):
    """Step plots of sampled counters (queue depths, drops) over the run's time axis."""
    ax = ax or plt.subplots(figsize=(10, 2.2))[1]
    by_name: dict[str, list] = {}
    for c in trace.counters:
        if names is None or c.name in names:
            by_name.setdefault(f"{c.name} (rank {c.rank})", []).append(c)
    for label, cs in by_name.items():
        ax.step([c.t_ns / 1e6 for c in cs], [c.value for c in cs], where="post", label=label)
    ax.set_xlabel("time (ms)")
    ax.set_xlim(0, trace.makespan_s * 1e3 * 1.01 or 1)
    if by_name:
        ax.legend(fontsize=8, loc="upper right")
    if title:
        ax.set_title(title, loc="left")
    return ax
