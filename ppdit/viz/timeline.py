"""Pictures of what the ranks did: timelines (one lane per rank) and busy/idle bars.

Plain matplotlib, so the figures land in notebooks, in the book, and as PNGs from the CLI."""

from __future__ import annotations

from itertools import groupby

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from ppdit.analysis.trace_stats import busy_fractions
from ppdit.runtime.observe.trace import Span, Trace

KIND_COLORS = {"compute": "#4C72B0", "send": "#DD8452", "gather": "#DA8BC3", "recv": "#55A868",
               "wait": "#C0C0C0", "collective": "#C44E52", "decode": "#8172B3", "boot": "#937860"}
_SHADES = (1.0, 0.65)  # alternate compute blocks on a lane so neighbours stay distinguishable
_INSIDE_COMPUTE = ("collective",)  # spans recorded inside a compute span
_MIN_PX = 3.0  # the narrowest a short span (a 1 ms send in a 1 s run) is drawn, in pixels
_LABEL_PT = 7  # compute labels' font size; a label is drawn only where it fits its block


def plot_timeline(trace: Trace, ax=None, title: str | None = None, label: bool = True,
                  kinds: tuple[str, ...] | None = None, window: tuple[float, float] | None = None):
    """Draw one horizontal lane per rank; spans coloured by kind, compute labelled by request.
    Consecutive compute spans of one request merge into one labelled block (one "r3" box, not
    14 slivers). Spans shorter than a few pixels (a send) are drawn a few pixels wide;
    collectives inside a step keep their true width. ``window=(start_ms, end_ms)`` enlarges part
    of the run, widths and labels fitted to what is shown. The legend names only kinds drawn."""
    ax = ax or plt.subplots(figsize=(10, 0.6 + 0.55 * max(1, len(trace.ranks))))[1]
    lo, hi = window or (0.0, trace.makespan_s * 1e3 * 1.01 or 1.0)
    ax.set_xlim(lo, hi)
    px_ms = (hi - lo) / max(ax.get_window_extent().width, 1.0)  # ms per pixel
    drawn: set[str] = set()
    for lane, rank in enumerate(trace.ranks):
        spans = [s for s in trace.select(rank=rank) if kinds is None or s.kind in kinds]
        drawn |= _draw_lane(ax, lane, spans, label, px_ms, ax.figure.dpi)
    ax.set_yticks(range(len(trace.ranks)), [f"rank {r}" for r in trace.ranks])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    shown = [k for k in KIND_COLORS if k in drawn]
    handles = [plt.Rectangle((0, 0), 1, 1, color=KIND_COLORS[k]) for k in shown]
    names = ["compute (two shades: neighbours)" if k == "compute" else k for k in shown]
    ax.legend(handles, names, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7,
              frameon=False, borderaxespad=0.0)
    if title:
        ax.set_title(title, loc="left")
    return ax


def _draw_lane(ax, lane: int, spans: list[Span], label: bool, px_ms: float, dpi: float) -> set[str]:
    """One rank's blocks; returns the kinds drawn (for the legend)."""
    n_compute, blocks = 0, _merge_compute(spans)
    for kind, name, start, end in blocks:
        color = KIND_COLORS.get(kind, "#999999")
        width = (end - start) / 1e6
        if kind == "compute":
            alpha, n_compute = _SHADES[n_compute % 2], n_compute + 1
        elif kind in _INSIDE_COMPUTE:  # dozens per step: widened, they would hide the step
            alpha = 0.9
        else:
            alpha, width = 0.9, max(width, _MIN_PX * px_ms)
        thin = kind in ("send", "gather")  # they overlap compute: thin, on the lane's lower edge
        ax.barh(lane + 0.25 if thin else lane, width, left=start / 1e6,
                height=0.3 if thin else 0.8, color=color, alpha=alpha, edgecolor="white",
                linewidth=0.3, zorder=2 if kind == "compute" else 3)  # over what it overlaps
        if label and kind == "compute" and name and _fits(name, width, px_ms, dpi):
            ax.text(start / 1e6 + width / 2, lane, name, ha="center", va="center",
                    fontsize=_LABEL_PT, color="white", clip_on=True)
    return {kind for kind, *_ in blocks}


def _fits(name: str, width_ms: float, px_ms: float, dpi: float) -> bool:
    """Whether ``name`` fits inside a block ``width_ms`` wide (about 0.6 em per character)."""
    text_px = len(name) * 0.6 * _LABEL_PT * dpi / 72
    return width_ms / px_ms >= text_px + 2


def _merge_compute(spans: list[Span]) -> list[tuple[str, str, int, int]]:
    """(kind, label, start, end) blocks: runs of same-named compute spans become one block,
    unless a wait longer than a quarter of a span parts them (a rank idle between a micro-batch's
    steps, e.g. PipeFusion's warm-up step and its first patch: two boxes, not one)."""
    out = []
    inner = [s for s in spans if s.kind in _INSIDE_COMPUTE]  # drawn over, not between, steps
    ordered = sorted((s for s in spans if s.kind not in _INSIDE_COMPUTE), key=lambda s: s.start_ns)
    for (kind, name), group in groupby(ordered, key=lambda s: (s.kind, s.name)):
        g = list(group)
        if kind != "compute":
            out += [(s.kind, s.name, s.start_ns, s.end_ns) for s in g]
            continue
        start = g[0].start_ns
        for a, b in zip(g, [*g[1:], None], strict=True):
            if b is None or b.start_ns - a.end_ns > (a.end_ns - a.start_ns) / 4:
                out.append((kind, name, start, a.end_ns))
                start = b.start_ns if b is not None else start
    return out + [(s.kind, s.name, s.start_ns, s.end_ns) for s in inner]


def plot_busy(trace: Trace, ax=None, title: str | None = None):
    """Stacked bars per rank: busy (compute) vs idle share of the whole run."""
    ax = ax or plt.subplots(figsize=(4.5, 3))[1]
    busy = busy_fractions(trace)
    names, shares = [str(r) for r in busy], list(busy.values())
    ax.bar(names, shares, color=KIND_COLORS["compute"], label="busy")
    ax.bar(names, [1 - b for b in shares], bottom=shares, color=KIND_COLORS["wait"], label="idle")
    for i, b in enumerate(shares):
        ax.text(i, b / 2, f"{b:.0%}", ha="center", va="center", color="white")
    # ylim: a band above the bars for the legend, where it covers no bar
    ax.set(xlabel="rank", ylabel="share of run", ylim=(0, 1.25), yticks=[0, 0.25, 0.5, 0.75, 1.0])
    ax.legend(fontsize=8, loc="upper center", ncol=2, frameon=False)
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
    end_ms = trace.makespan_s * 1e3
    for label, cs in by_name.items():  # each held until the run's end: its last value stands
        ax.step([c.t_ns / 1e6 for c in cs] + [end_ms], [c.value for c in cs] + [cs[-1].value],
                where="post", label=label)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # depths and counts are whole
    ax.set(xlabel="time (ms)", xlim=(0, trace.makespan_s * 1e3 * 1.01 or 1))
    if by_name:
        ax.legend(fontsize=8, loc="upper right")
    if title:
        ax.set_title(title, loc="left")
    return ax
