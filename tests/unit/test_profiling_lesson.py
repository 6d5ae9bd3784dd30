"""Lesson 08's profiler section (``ppdit.teaching.profiling``), on one step of the tiny model.

The lesson states an exact relation between the profiler's events and ``count_ops``: the
top-level aten events (no aten op above them) are the operators ``count_ops`` counts, one for
one and name for name, and every aten event is its ``total``. These tests fail if the extraction
drifts from that, or if the spans the figure draws stop being a clean sequence.
"""

from __future__ import annotations

import json

import matplotlib
import matplotlib.pyplot as plt
import pytest
from torch.profiler import ProfilerActivity, profile

from ppdit.analysis.overhead import _quiet_native_output, count_ops
from ppdit.cuda_graph import StepGraph
from ppdit.presets import get_preset
from ppdit.sampler import Request, SamplingConfig, initial_noise
from ppdit.teaching.profiling import (
    MARKER,
    call_tree,
    export_trace,
    is_aten,
    op_family,
    profile_step,
    top_level_events,
)
from ppdit.viz.profiling import FAMILY_COLORS, plot_step_lanes

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def step_fn(tiny):
    shape = get_preset("tiny").latent_shape
    runner = StepGraph(tiny, latent_shape=shape, sampling=SamplingConfig(num_steps=4))
    runner.load_request(Request(0, 0))
    noise = initial_noise(Request(0, 0), shape)
    return lambda: runner.step(noise, 0)


@pytest.fixture(scope="module")
def profiled(tiny, step_fn):
    return count_ops(step_fn), profile_step(step_fn, model=tiny)


def test_top_level_spans_are_ordered_and_do_not_overlap(profiled):
    _, step = profiled
    assert step.ops, "no top-level operator found"
    for a, b in zip(step.ops, step.ops[1:], strict=False):
        assert a.start_us <= a.end_us <= b.start_us, (a, b)
    assert step.ops[0].start_us >= 0 and step.ops[-1].end_us <= step.step_us


def test_the_counts_are_count_ops_exactly(profiled):
    ops, step = profiled
    assert len(step.ops) == ops.top_level
    assert step.aten_calls == ops.total
    assert step.by_name() == ops.by_name
    assert step.aten_calls > len(step.ops)  # the profiler also sees nested calls


def test_without_a_marker_top_level_means_no_parent_at_all(step_fn):
    step_fn()
    with _quiet_native_output(), profile(activities=[ProfilerActivity.CPU]) as prof:
        step_fn()
    events = list(prof.events())
    roots = [e for e in events if e.cpu_parent is None]
    assert all(map(is_aten, roots))
    assert {id(e) for e in roots} == {id(e) for e in top_level_events(events)}


def test_the_markers_self_time_is_the_time_between_operators(profiled):
    _, step = profiled
    assert step.marker.self_cpu_time_total == pytest.approx(step.step_us - step.ops_us, abs=1.0)
    assert sum(step.by_family_us().values()) == pytest.approx(step.ops_us)


def test_ppdit_spans_name_every_block_inside_the_step(profiled, tiny):
    _, step = profiled
    (outer,) = step.trace.select(kind="step")
    modules = step.trace.select(kind="module")
    names = [s.name for s in modules]
    assert [n for n in names if n.startswith("block")] == \
        [f"block {i}" for i in range(len(tiny.blocks))]
    assert all(outer.start_ns <= s.start_ns <= s.end_ns <= outer.end_ns for s in modules)
    assert 0 <= step.alignment_us < 0.5 * step.step_us
    hooked = [m for m in tiny.modules() if m._forward_hooks or m._forward_pre_hooks]
    assert hooked == [], "module_spans left hooks on the model"


def test_families_and_call_tree():
    assert op_family("aten::linear") == "linear / matmul"
    assert op_family("aten::scaled_dot_product_attention") == "attention"
    assert op_family("aten::rms_norm") == "norm"
    assert op_family("aten::mul_") == "elementwise"
    assert op_family("aten::permute") == "other (views, casts, copies)"
    assert {op_family(n) for n in ("aten::addmm", "aten::gelu", "aten::to")} <= set(FAMILY_COLORS)


def test_a_linear_calls_addmm(profiled):
    _, step = profiled
    linear = next(e for e in step.top if e.name == "aten::linear")
    assert "aten::addmm" in call_tree(linear)


def test_export_and_figure(profiled, tmp_path):
    _, step = profiled
    path = export_trace(step, tmp_path / "step.json")
    names = {e.get("name") for e in json.loads(path.read_text())["traceEvents"]}
    assert MARKER in names and "aten::linear" in names
    ax = plot_step_lanes(step, title="t")
    assert len(ax.get_yticks()) == 2 and ax.get_legend() is not None
    assert ax.get_xlim()[1] * 1e3 >= step.step_us
    plt.close(ax.figure)
