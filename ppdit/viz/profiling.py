"""The two-lane picture of one profiled step (``ppdit.teaching.profiling``): the profiler's
top-level operators coloured by family, above ppdit's own spans of the same step."""

from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

if TYPE_CHECKING:
    from ppdit.teaching.profiling import StepProfile

FAMILY_COLORS = {"linear / matmul": "#4C72B0", "attention": "#C44E52", "norm": "#55A868",
                 "elementwise": "#DD8452", "other (views, casts, copies)": "#A0A0A0"}
SPAN_COLORS = {"step": "#DDDDDD", "module": "#8172B3"}  # ppdit's lane


def plot_step_lanes(step: StepProfile, ax=None, title: str | None = None):
    """One figure, two lanes over the same step: the profiler's top-level operators coloured by
    family, and ppdit's spans (the step, and each module as its forward hooks saw it).
    Each lane starts at its own clock's start of the step (``ppdit.teaching.profiling``). Gaps
    in the top lane are time spent outside any aten operator: Python, hooks, the dispatcher's
    entry. The lanes use ``broken_barh``, one call per colour, so hundreds of ops draw fast."""
    ax = ax or plt.subplots(figsize=(11, 2.6))[1]
    lanes = {"torch.profiler:\ntop-level aten ops": 0, "ppdit Tracer:\nstep + modules": 1}
    for family, color in FAMILY_COLORS.items():
        bars = [(op.start_us / 1e3, op.duration_us / 1e3) for op in step.ops
                if op.family == family]
        ax.broken_barh(bars, (-0.4, 0.8), facecolors=color, linewidth=0)
    end_ms = max(step.step_us, step.tracer_step_us) / 1e3
    for s in step.trace.spans:
        start, width = s.start_ns / 1e6, (s.end_ns - s.start_ns) / 1e6
        if s.kind == "step":
            ax.broken_barh([(start, width)], (1.25, 0.15), facecolors=SPAN_COLORS["step"],
                           edgecolor="#606060", linewidth=0.5)
            continue
        ax.broken_barh([(start, width)], (0.6, 0.6), facecolors=SPAN_COLORS["module"],
                       edgecolor="white", linewidth=0.5)
        if width > 0.05 * end_ms:
            ax.text(start + width / 2, 0.9, s.name, ha="center", va="center", fontsize=7,
                    color="white", clip_on=True)
    ax.set_yticks(list(lanes.values()), list(lanes))
    ax.set(ylim=(1.5, -0.6), xlim=(0, end_ms * 1.01),
           xlabel="time from the step's start (ms; each lane on its own clock, see text)")
    handles = [Patch(color=c, label=f) for f, c in FAMILY_COLORS.items()]
    handles += [Patch(color=SPAN_COLORS["module"], label="ppdit: module (forward hooks)"),
                Patch(facecolor=SPAN_COLORS["step"], edgecolor="#606060",
                      label="ppdit: the step (Tracer.span)")]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if title:
        ax.set_title(title, loc="left")
    return ax
