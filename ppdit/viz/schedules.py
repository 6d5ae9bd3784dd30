"""Pictures of pipeline schedules and their bubbles, and an explorer that redraws them.

Everything is drawn from ``ppdit.analysis.bubbles.simulate_schedule``: the real task orders and
wrap rules, on a clock where each stage's chunk costs 1/V of a stage-time (times an optional
slow-down of the last stage). ``schedule_figure`` is the static picture the book and nbval show;
``make_explorer`` wraps it in ipywidgets sliders for a live kernel.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from ppdit.analysis.bubbles import layer_split_bubble, simulate_schedule
from ppdit.parallel.layer_split.schedule import SimSpan, sim_bubble
from ppdit.viz import explorer


def plot_schedule(spans: list[SimSpan], num_stages: int, ax=None, title: str | None = None):
    """Gantt chart of simulated spans: one lane per rank, colour by micro-batch, step shaded."""
    ax = ax or plt.subplots(figsize=(9, 0.5 + 0.45 * num_stages))[1]
    for s in spans:
        color = plt.cm.tab10(s.task.micro % 10)
        ax.barh(s.rank, s.end - s.start, left=s.start, color=color, edgecolor="white",
                linewidth=0.5, alpha=1.0 if s.task.step % 2 == 0 else 0.55)
        if s.end - s.start >= 0.3:
            label = f"{s.task.micro}" + "'" * s.task.chunk  # primes count the chunk
            ax.text((s.start + s.end) / 2, s.rank, label, ha="center", va="center", fontsize=7,
                    color="white")
    ax.set_yticks(range(num_stages), [f"rank {r}" for r in range(num_stages)])
    ax.invert_yaxis()
    ax.set_xlabel("time (stage-times)")
    if title:
        ax.set_title(title, loc="left")
    return ax


def schedule_figure(num_stages: int = 4, micro: int = 4, virtual: int = 1, steps: int = 2,
                    wrap: bool = False, last_stage_slowdown: float = 0.0):
    """The explorer's picture: the simulated schedule, its bubble and the formula's."""
    spans = simulate_schedule(num_stages, micro, virtual, steps, wrap, last_stage_slowdown)
    measured = sim_bubble(spans, num_stages)
    formula = layer_split_bubble(micro, num_stages, virtual, steps, wrap)
    fig, ax = plt.subplots(figsize=(10, 0.9 + 0.45 * num_stages))
    note = "" if last_stage_slowdown == 0 else f", last stage {1 + last_stage_slowdown:.2f}x"
    plot_schedule(spans, num_stages, ax, title=(
        f"P={num_stages}, M={micro}, V={virtual}, {steps} steps, "
        f"{'wrap' if wrap else 'flush each step'}{note}: bubble {measured:.1%} "
        f"(formula for balanced stages {formula:.1%})"))
    fig.tight_layout()
    return fig


def make_explorer():
    """Sliders for P, M, V, steps, wrap and last-stage slow-down, redrawing ``schedule_figure``
    (``ppdit.viz.explorer``: race-free in JupyterLab). Combinations the schedule cannot run
    (V x P above 40 blocks) show the error instead."""
    import ipywidgets as w  # only a live kernel needs widgets; the static figure does not

    controls = {
        "num_stages": w.IntSlider(value=4, min=1, max=8, description="P stages"),
        "micro": w.IntSlider(value=4, min=1, max=16, description="M micro"),
        "virtual": w.IntSlider(value=1, min=1, max=4, description="V chunks"),
        "steps": w.IntSlider(value=2, min=1, max=6, description="steps"),
        "wrap": w.Checkbox(value=False, description="wrap across steps"),
        "last_stage_slowdown": w.FloatSlider(value=0.0, min=0.0, max=1.0, step=0.05,
                                             description="last slower"),
    }
    return explorer.make_explorer(controls, schedule_figure, rows=(3, 3),
                                  summary="Schedule explorer: sliders for P, M, V, steps, wrap "
                                          "and a slower last stage")
