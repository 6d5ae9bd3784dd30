"""Pictures of pipeline schedules and their bubbles, and an explorer that redraws them.

Everything is drawn from ``ppdit.analysis.bubbles.simulate_schedule``: the real task orders and
wrap rules, on a clock where each stage's chunk costs 1/V of a stage-time (times an optional
slow-down of the last stage)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.legend_handler import HandlerTuple
from matplotlib.patches import Patch

from ppdit.analysis.bubbles import layer_split_bubble, simulate_schedule
from ppdit.parallel.layer_split.schedule import SimSpan, sim_bubble
from ppdit.viz import explorer

PALE = 0.55  # alpha of the spans of odd steps
MIN_LABEL_WIDTH = 0.3  # stage-times: a narrower span has no room for its micro-batch number


def plot_schedule(spans: list[SimSpan], num_stages: int, ax=None, title: str | None = None):
    """Gantt chart of simulated spans: one lane per rank, colour by micro-batch, step shaded;
    a key beside the lanes says so, since neither colour, shade nor prime explains itself."""
    ax = ax or plt.subplots(figsize=(9, 0.5 + 0.45 * num_stages))[1]
    for s in spans:
        color = plt.cm.tab10(s.task.micro % 10)
        ax.barh(s.rank, s.end - s.start, left=s.start, color=color, edgecolor="white",
                linewidth=0.5, alpha=1.0 if s.task.step % 2 == 0 else PALE)
        if s.end - s.start >= MIN_LABEL_WIDTH:
            label = f"{s.task.micro}" + "'" * s.task.chunk  # primes count the chunk
            ax.text((s.start + s.end) / 2, s.rank, label, ha="center", va="center", fontsize=7,
                    color="white")
    ax.set_yticks(range(num_stages), [f"rank {r}" for r in range(num_stages)])
    ax.invert_yaxis()
    ax.set_xlabel("time (stage-times)")
    if title:
        ax.set_title(title, loc="left")
    _schedule_key(ax, spans)
    return ax


def _schedule_key(ax, spans: list[SimSpan]) -> None:
    """Legend outside the lanes (inside, it would cover spans), one entry per encoding that
    is drawn: colour = micro-batch, pale = odd step, primes = the chunk (V > 1)."""
    if not spans:
        return
    micros = sorted({s.task.micro for s in spans})[:10]  # tab10 repeats after 10

    def swatch(alpha: float) -> tuple[Patch, ...]:
        return tuple(Patch(color=plt.cm.tab10(m % 10), alpha=alpha) for m in micros)

    entries = [(swatch(1.0), "colour: micro-batch\n0, 1, 2, ...")]
    if any(s.task.step % 2 for s in spans):
        entries.append((swatch(PALE), "pale: odd step\n(1, 3, ...)"))
    if any(s.task.chunk and s.end - s.start >= MIN_LABEL_WIDTH for s in spans):
        entries.append((Patch(color="none"), "primes: the chunk\n(1' = micro-batch 1,\n"
                                             "chunk 1)"))
    handles, labels = zip(*entries, strict=True)
    ax.legend(handles, labels, handler_map={tuple: HandlerTuple(ndivide=None, pad=0)},
              fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False,
              handlelength=3.0)


def schedule_figure(num_stages: int = 4, micro: int = 4, virtual: int = 1, steps: int = 2,
                    wrap: bool = False, last_stage_slowdown: float = 0.0):
    """The explorer's picture: the simulated schedule, its bubble and the formula's."""
    fig, ax = plt.subplots(figsize=(10, 0.9 + 0.45 * num_stages))
    _draw_setting(ax, num_stages, micro, virtual, steps, wrap, last_stage_slowdown)
    fig.tight_layout()
    return fig


def schedule_multiples(settings: Sequence[Mapping[str, Any]]):
    """Several explorer settings stacked on one time axis (stage-times), so the static book
    shows what the sliders would: each is ``schedule_figure``'s keywords, as a dict."""
    heights = [0.9 + 0.45 * s.get("num_stages", 4) for s in settings]
    fig, axes = plt.subplots(len(settings), 1, figsize=(10, sum(heights)), sharex=True,
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, setting in zip(axes[:, 0], settings, strict=True):
        _draw_setting(ax, **setting)
        ax.xaxis.set_tick_params(labelbottom=True)  # each panel keeps its numbers
    fig.tight_layout()
    return fig


def _draw_setting(ax, num_stages: int = 4, micro: int = 4, virtual: int = 1, steps: int = 2,
                  wrap: bool = False, last_stage_slowdown: float = 0.0) -> None:
    spans = simulate_schedule(num_stages, micro, virtual, steps, wrap, last_stage_slowdown)
    measured = sim_bubble(spans, num_stages)
    formula = layer_split_bubble(micro, num_stages, virtual, steps, wrap)
    note = "" if last_stage_slowdown == 0 else f", last stage {1 + last_stage_slowdown:.2f}x"
    plot_schedule(spans, num_stages, ax, title=(
        f"P={num_stages}, M={micro}, V={virtual}, {steps} steps, "
        f"{'wrap' if wrap else 'flush each step'}{note}: bubble {measured:.1%} "
        f"(formula for balanced stages {formula:.1%})"))


def make_explorer():
    """Sliders for P, M, V, steps, wrap and last-stage slow-down, redrawing ``schedule_figure``
    (``ppdit.viz.explorer``: race-free in JupyterLab). Combinations the schedule cannot run
    (V x P above 40 blocks) show the error instead."""
    import ipywidgets as w  # only a live kernel needs widgets; the static figure does not

    controls = {"num_stages": w.IntSlider(value=4, min=1, max=8, description="P stages"),
                "micro": w.IntSlider(value=4, min=1, max=16, description="M micro"),
                "virtual": w.IntSlider(value=1, min=1, max=4, description="V chunks"),
                "steps": w.IntSlider(value=2, min=1, max=6, description="steps"),
                "wrap": w.Checkbox(value=False, description="wrap across steps"),
                "last_stage_slowdown": w.FloatSlider(value=0.0, min=0.0, max=1.0, step=0.05,
                                                     description="last slower")}
    return explorer.make_explorer(controls, schedule_figure, rows=(3, 3),
                                  summary="Schedule explorer (P, M, V, steps, wrap, a slower last "
                                          "stage)")
