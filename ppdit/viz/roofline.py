"""Roofline pictures and the ipywidgets explorer that redraws them (notebook 10).

Every figure comes from a plain function, so a notebook can draw the static fallback with the
same code the widget calls: the book and nbval show the default view without a live kernel."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from ppdit.analysis.gpu_runs import ForwardPoint
from ppdit.analysis.hardware import GPUS, LINKS, Hardware, Prediction, op_seconds, predict
from ppdit.analysis.measure import Timed
from ppdit.analysis.roofline import RESOLUTIONS, Op, latent_for, model_ops, totals
from ppdit.parallel.layout import Layout
from ppdit.presets import get_preset
from ppdit.viz import explorer

GROUP_COLORS = {"matmul": "#4C72B0", "attention": "#C44E52", "conv": "#8172B3",
                "elementwise": "#55A868"}
TERM_COLORS = {"compute": "#4C72B0", "memory": "#55A868", "link": "#DD8452"}
def draw_ceilings(ax, peak: float, bandwidths: Mapping[str, float], *,
                  x_range: tuple[float, float] = (1e-2, 1e5), label: str = "peak") -> None:
    """The roofline itself on log-log axes: y = min(peak, intensity x bandwidth) per bandwidth."""
    x = np.logspace(np.log10(x_range[0]), np.log10(x_range[1]), 200)
    styles = ["-", "--", ":"]
    for i, (name, bw) in enumerate(bandwidths.items()):
        ax.plot(x, np.minimum(peak, x * bw), color="black", lw=1.2, ls=styles[i % 3],
                label=f"{name}: {bw / 1e9:,.0f} GB/s, ridge {peak / bw:,.0f} FLOP/B")
    ax.axhline(peak, color="black", lw=0.5, alpha=0.3)
    ax.text(x_range[0] * 1.3, peak * 1.15, f"{label}: {peak / 1e12:,.3g} TFLOP/s", ha="left",
            va="bottom", fontsize=8)
    ax.set(xscale="log", yscale="log", xlim=x_range, ylabel="FLOP/s (log scale)",
           xlabel="arithmetic intensity (FLOP / byte, log scale)")
    ax.grid(True, which="major", alpha=0.3)


def plot_ops_roofline(ops: Sequence[Op], hw: Hardware, dtype: str = "bf16", ax=None,
                      title: str | None = None, label_top: int = 5):
    """Each op at (intensity, attainable FLOP/s) on ``hw``'s roofline; marker area ~ time share.
    Ops of one group at the same intensity (q, k, v and out projections...) share a point; the
    ``label_top`` points that take the most time are named, with their share of the total."""
    ax = ax or plt.subplots(figsize=(6.5, 4.5))[1]
    peak = hw.peak_flops(dtype)
    draw_ceilings(ax, peak, {f"{hw.name} memory": hw.mem_bw}, label=f"{hw.name} {dtype}")
    points: dict[tuple[str, float], list] = {}
    for op in ops:
        entry = points.setdefault((op.group, round(np.log10(op.intensity), 3)),
                                  [op.intensity, 0.0, []])
        entry[1] += sum(op_seconds(op, hw, dtype))
        entry[2].append(op.name.removeprefix("blocks."))
    total = sum(e[1] for e in points.values()) or 1.0
    for (group, _), (x, secs, _) in _small_on_top(points):
        ax.scatter(x, min(peak, x * hw.mem_bw), s=20 + 600 * secs / total,
                   color=GROUP_COLORS[group], alpha=0.7, edgecolor="white", zorder=3)
    ranked = sorted(points.values(), key=lambda e: -e[1])[:label_top]
    # the top label slot to the highest point (leftmost first along the flat roof), each line
    # from its label's top-left corner, so leader lines do not cross; each label sits on a white
    # box drawn over the lines rising from the slots below it: no line runs through its text
    ranked.sort(key=lambda e: (-min(peak, e[0] * hw.mem_bw), e[0]))
    for i, (x, secs, names) in enumerate(ranked):
        text = ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "")
        ax.annotate(f"{text}: {100 * secs / total:.0f}%", (x, min(peak, x * hw.mem_bw)),
                    xytext=(0.42, 0.72 - 0.07 * i), textcoords="axes fraction", fontsize=7,
                    arrowprops={"arrowstyle": "-", "color": "gray", "lw": 0.5, "relpos": (0, 1)},
                    bbox={"fc": "white", "ec": "none", "alpha": 0.85, "pad": 1.0},
                    zorder=5 + len(ranked) - i)
    _group_legend(ax, {op.group for op in ops})
    if title:
        ax.set_title(title, fontsize=10)
    return ax


def _small_on_top(points: Mapping[tuple[str, float], list]) -> list:
    """Points in drawing order, biggest first: a small marker drawn later stays visible on a big
    one. At equal size the group with less time in all is drawn last, so a lone "conv" point
    (Wan's patch embedding) is not hidden under a "matmul" point at the same intensity."""
    group_secs: dict[str, float] = {}
    for (group, _), (_, secs, _) in points.items():
        group_secs[group] = group_secs.get(group, 0.0) + secs
    return sorted(points.items(), key=lambda kv: (-kv[1][1], -group_secs[kv[0][0]]))


def _group_legend(ax, groups) -> None:
    handles = ax.get_legend_handles_labels()[0]
    handles += [plt.Line2D([], [], ls="", marker="o", color=GROUP_COLORS[g], label=g)
                for g in GROUP_COLORS if g in groups]
    ax.legend(handles=handles, fontsize=7, loc="lower right")


def plot_measured_roofline(timed: Mapping[str, Sequence[Timed]], machine: Hardware,
                           cache_bw: float | None = None, ax=None, title: str | None = None):
    """Measured ops as points (intensity, achieved FLOP/s) under this machine's measured roofs.
    ``timed`` maps a label (a preset) to its timed ops; each label gets its own marker."""
    ax = ax or plt.subplots(figsize=(7, 4.8))[1]
    bws = {"memory (copy)": machine.mem_bw} | ({"cache (copy)": cache_bw} if cache_bw else {})
    draw_ceilings(ax, machine.fp32_flops, bws, x_range=(3e-2, 3e2), label="matmul fp32")
    markers = "os^D"
    for i, (label, points) in enumerate(timed.items()):
        for t in points:
            ax.scatter(t.op.intensity, t.achieved_flops, marker=markers[i % 4], s=28,
                       color=GROUP_COLORS[t.op.group], alpha=0.8, edgecolor="black", lw=0.3)
        ax.scatter([], [], marker=markers[i % 4], color="gray", label=label)
    _group_legend(ax, {t.op.group for pts in timed.values() for t in pts})
    ax.set_ylim(machine.fp32_flops / 3e3, machine.fp32_flops * 3)
    ax.set_title(title or f"{machine.name}: measured ops vs measured ceilings", fontsize=10)
    return ax


def plot_comm_roofline(sweep: Mapping[str, Sequence[float]], latency_s: float,
                       bandwidth: float, marks: Mapping[str, float], ax=None):
    """Achieved bytes/s vs message size for P2P and all-reduce, under the alpha-beta ceiling
    bytes / (latency + bytes / bandwidth); vertical lines mark the messages a layout sends."""
    ax = ax or plt.subplots(figsize=(7, 4.2))[1]
    n = np.array(sweep["bytes"], dtype=float)
    x = np.logspace(np.log10(n.min()) - 0.5, np.log10(max(n.max(), *marks.values())) + 0.5, 200)
    ax.plot(x, x / (latency_s + x / bandwidth), color="black", lw=1.2,
            label=f"ceiling: {latency_s * 1e6:,.0f} us + bytes / {bandwidth / 1e9:,.2f} GB/s")
    ax.plot(n, n / np.array(sweep["p2p_s"]), "o-", color=TERM_COLORS["link"], label="send/recv")
    ax.plot(n, n / np.array(sweep["allreduce_s"]), "s--", color="#8172B3",
            label="all_reduce (message / time)")
    floor = min(n / np.array(sweep["allreduce_s"]))
    for name, size in marks.items():
        ax.axvline(size, color="gray", lw=0.8, ls=":")
        ax.text(size, floor, f" {name}", fontsize=7, rotation=90, va="bottom", ha="right")
    ax.set(xscale="log", yscale="log", xlabel="message size (bytes, log scale)",
           ylabel="achieved bytes/s (one way, log scale)")
    ax.grid(True, alpha=0.3)
    # below the axes, as plot_alpha_beta does: inside, it covers the small-message points
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)
    return ax


def plot_predictions(rows: Sequence[Prediction], ax=None, title: str | None = None):
    """Stacked horizontal bars per prediction: compute-bound, bandwidth-bound and link time."""
    ax = ax or plt.subplots(figsize=(8, 0.6 + 0.32 * len(rows)))[1]
    labels = [f"{r.gpu} · {r.layout}" + (f" · {r.link}" if r.gpus > 1 else "") for r in rows]
    left = np.zeros(len(rows))
    for term, attr in [("compute", "flop_s"), ("memory", "memory_s"), ("link", "comm_s")]:
        vals = np.array([getattr(r, attr) for r in rows])
        ax.barh(range(len(rows)), vals, left=left, color=TERM_COLORS[term], label=term)
        left += vals
    for i, r in enumerate(rows):
        ax.text(left[i], i, f" {r.step_s:,.2f} s" + ("" if r.fits else " (weights do not fit)"),
                va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set(xlim=(0, left.max() * 1.3),
           xlabel="lower bound per denoising step (s), layout kept busy")
    ax.legend(fontsize=7, loc="lower right")
    if title:
        ax.set_title(title, fontsize=10)
    return ax


FORWARD_BARS = (  # (attribute of ForwardPoint, legend label, colour), drawn top to bottom
    ("bound_ms", "lower bound, datasheet ceilings", "#BBBBBB"),
    ("ceiling_bound_ms", "lower bound, ceilings reached", "#8C8C8C"),
    ("compiled_ms", "measured, torch.compile", "#55A868"),
    ("measured_ms", "measured, eager", "#4C72B0"),
)


def plot_gpu_forwards(points: Sequence[ForwardPoint], axes=None):
    """Measured GPU forwards against their predicted lower bounds: one panel per forward, a bar
    per figure (missing ones left out), each labelled with its ms and its ratio to the datasheet
    bound; the panel's title carries the run's provenance label."""
    if not points:
        raise ValueError("no measured GPU forward to plot: gpu_runs/ has none with status 'ok'")
    if axes is None:
        axes = plt.subplots(len(points), 1, figsize=(8, 0.6 + 1.8 * len(points)),
                            squeeze=False)[1][:, 0]
    for ax, pt in zip(axes, points, strict=True):
        bars = [(label, getattr(pt, attr), color) for attr, label, color in FORWARD_BARS
                if getattr(pt, attr) is not None]
        ys = range(len(bars))
        ax.barh(list(ys), [ms for _, ms, _ in bars], color=[c for *_, c in bars])
        for y, (_, ms, _) in zip(ys, bars, strict=True):
            vs = f" ({ms / pt.bound_ms:.2f}x the bound)" if pt.bound_ms and y else ""
            ax.text(ms, y, f" {ms:,.0f} ms{vs}", va="center", fontsize=7)
        ax.set_yticks(list(ys), [label for label, _, _ in bars], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, max(ms for _, ms, _ in bars) * 1.45)
        tokens = f", {pt.tokens:,} tokens" if pt.tokens else ""
        bound_on = f", bound on {pt.bound_hardware}" if pt.bound_hardware else ""
        ax.set_title(f"{pt.model} forward{tokens}{bound_on}\n[{pt.label}]", fontsize=8,
                     loc="left")
        ax.set_xlabel("ms per forward (one GPU)")  # every panel: their x scales differ
    return axes


def explorer_figure(model: str = "wan2.1-14b", resolution: str = "480p", frames: int = 81,
                    dtype: str = "bf16", gpu: str = "H100 SXM", tp: int = 1, pp: int = 1,
                    split: str = "layer", link: str | None = None):
    """The explorer's view: left, one forward's ops on one rank of the chosen layout, on the
    GPU's roofline; right, the step's lower bounds for 1 GPU and for the layout. An impossible
    choice (TP that does not divide the heads, a dtype the GPU lacks) is drawn as its error
    message: the failure regime is part of the lesson."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6),
                                      gridspec_kw={"width_ratios": [1.15, 1]})
    try:
        shape = latent_for(resolution, frames)
        layout = Layout(tp=tp, **{split: pp})
        hw, p = GPUS[gpu], get_preset(model)
        ops = model_ops(p, shape, dtype=dtype, tp=tp)
        plot_ops_roofline(ops, hw, dtype, ax=left,
                          title=f"{model}, one forward on one TP rank (TP={tp})")
        rows = [predict(model, gpu, latent_shape=shape, dtype=dtype)]
        if layout.ranks > 1:
            rows.append(predict(model, gpu, layout, link=link, latent_shape=shape, dtype=dtype))
        plot_predictions(rows, ax=right)
        t = totals(ops)
        fig.suptitle(f"{model} · {resolution} · {frames} frames -> latent {shape}, "
                     f"{p.num_tokens(shape):,} tokens · {dtype} · {gpu} · one forward per rank "
                     f"{t.flops / 1e12:,.1f} TFLOP, {t.bytes / 1e9:,.1f} GB", fontsize=9)
    except (ValueError, KeyError) as err:
        for ax in (left, right):
            ax.axis("off")
        left.text(0, 0.5, f"not possible: {err}", wrap=True, fontsize=10, color="#C44E52")
    fig.tight_layout()
    return fig


def explorer_multiples(settings: Sequence[Mapping[str, Any]], ncols: int = 2):
    """Several explorer settings side by side, each one rank's forward on its GPU's roofline:
    what the dropdowns would show, for readers of the static book. Each setting is a dict of
    ``model``, ``resolution``, ``frames``, ``dtype``, ``gpu`` and ``tp``."""
    nrows = -(-len(settings) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.5 * ncols, 4.6 * nrows), squeeze=False)
    for ax, st in zip(axes.flat, settings, strict=False):
        shape = latent_for(st["resolution"], st["frames"])
        ops = model_ops(get_preset(st["model"]), shape, dtype=st["dtype"], tp=st["tp"])
        t = totals(ops)
        plot_ops_roofline(ops, GPUS[st["gpu"]], st["dtype"], ax=ax, title=(
            f"{st['model']}, {st['resolution']} x {st['frames']} frames, {st['dtype']}, "
            f"TP={st['tp']}\n{get_preset(st['model']).num_tokens(shape):,} tokens; one rank's "
            f"forward {t.flops / 1e12:,.1f} TFLOP, {t.bytes / 1e9:,.1f} GB"))
    for ax in list(axes.flat)[len(settings):]:
        ax.axis("off")
    fig.tight_layout()
    return fig


FASTEST = "as sold (fastest)"  # the link dropdown's default: each GPU's own fastest link


def make_explorer():
    """Dropdowns for model, resolution, frames, dtype, GPU, TP, PP, split and link that redraw
    ``explorer_figure`` (``ppdit.viz.explorer``: race-free in JupyterLab; needs a live kernel)."""
    import ipywidgets as w  # only a live kernel needs widgets; the static figure does not

    controls = dict(model=w.Dropdown(options=["wan2.1-1.3b", "wan2.1-14b"], value="wan2.1-14b"),
                    resolution=w.Dropdown(options=list(RESOLUTIONS), value="480p"),
                    frames=w.Dropdown(options=[17, 33, 49, 65, 81], value=81),
                    dtype=w.Dropdown(options=["bf16", "fp8", "fp32"], value="bf16"),
                    gpu=w.Dropdown(options=list(GPUS), value="H100 SXM"),
                    tp=w.Dropdown(options=[1, 2, 4, 8], value=1, description="TP"),
                    pp=w.Dropdown(options=[1, 2, 4, 8], value=1, description="PP"),
                    split=w.Dropdown(options=["layer", "step"], value="layer"),
                    # a string for the default, not None: a Dropdown set to None shows an empty box
                    link=w.Dropdown(options=[FASTEST, *LINKS], value=FASTEST))
    for name, c in controls.items():
        c.description = c.description or name
        c.layout = w.Layout(width="210px")

    def draw(link: str, **kwargs):
        return explorer_figure(link=None if link == FASTEST else link, **kwargs)

    return explorer.make_explorer(controls, draw, rows=(5, 4),
                                  summary="Roofline explorer (model, size, dtype, GPU, TP/PP, "
                                          "link)")
