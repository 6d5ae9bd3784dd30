"""Tracing, trace statistics and plots on hand-made spans (exact expected numbers)."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import pytest

from ppdit.analysis.trace_stats import (
    busy_fractions,
    handoff_latencies,
    kind_totals,
)
from ppdit.runtime.observe.trace import RankTrace, Span, Tracer, merge
from ppdit.viz.timeline import plot_busy, plot_timeline

MS = 1_000_000


def _two_rank_trace():
    r0 = RankTrace(0, "h", 0, [
        Span(0, "compute", "r0", 100 * MS, 110 * MS, {"request": 0, "step": 0}),
        Span(0, "send", "r0", 110 * MS, 111 * MS, {"request": 0, "step": 1}),
        Span(0, "compute", "r1", 111 * MS, 121 * MS, {"request": 1, "step": 0}),
    ])
    r1 = RankTrace(1, "h", 0, [
        Span(1, "recv", "r0", 100 * MS, 112 * MS, {"request": 0, "step": 1}),
        Span(1, "compute", "r0", 112 * MS, 122 * MS, {"request": 0, "step": 1}),
    ])
    return merge([r0, r1])


def test_merge_starts_at_zero_on_one_clock():
    t = _two_rank_trace()
    assert min(s.start_ns for s in t.spans) == 0
    assert t.makespan_s == pytest.approx(0.022)
    assert t.ranks == [0, 1]


def test_merge_aligns_other_hosts_by_their_epochs():
    a = RankTrace(0, "a", 1000 * MS, [Span(0, "compute", "", 1001 * MS, 1002 * MS)])
    b = RankTrace(1, "b", 5000 * MS, [Span(1, "compute", "", 5001 * MS, 5003 * MS)])
    t = merge([a, b])
    assert [(s.rank, s.start_ns, s.end_ns) for s in t.spans] == [(0, 0, MS), (1, 0, 2 * MS)]


def test_busy_fractions_and_totals():
    t = _two_rank_trace()
    assert busy_fractions(t) == {0: pytest.approx(20 / 22), 1: pytest.approx(10 / 22)}
    assert kind_totals(t)[1] == {"recv": pytest.approx(0.012), "compute": pytest.approx(0.010)}


def test_handoff_latency_excludes_waiting_for_the_producer():
    # recv posted at 100 ms, send started at 110 ms, data in at 112 ms: the handoff is 2 ms.
    assert handoff_latencies(_two_rank_trace()) == [pytest.approx(0.002)]


def test_chrome_export_has_one_event_per_span_and_rank_names(tmp_path):
    t = _two_rank_trace()
    data = json.loads(t.save_chrome(tmp_path / "x.json").read_text())
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 5
    assert {e["args"]["name"] for e in data["traceEvents"] if e["ph"] == "M"} == {"rank 0",
                                                                                  "rank 1"}
    send = next(e for e in spans if e["cat"] == "send")
    assert send["tid"] == 1 and send["ts"] == pytest.approx(10_000) and send["dur"] == 1000


def test_tracer_records_spans_and_counters():
    tr = Tracer(rank=3)
    with tr.span("compute", "r7", request=7) as s:
        pass
    tr.counter("queue", 2)
    out = tr.finish()
    assert out.rank == 3 and out.spans == [s] and s.end_ns >= s.start_ns
    assert out.counters[0].value == 2.0
    assert Tracer(enabled=False).finish().spans == []


def test_plots_draw_merged_blocks():
    t = _two_rank_trace()
    ax = plot_timeline(t)
    # rank 0: compute r0, send, compute r1 -> 3 bars; rank 1: recv, compute -> 2 bars
    assert len(ax.patches) == 5
    assert {x.get_text() for x in ax.texts} == {"r0", "r1"}
    assert len(plot_busy(t).patches) == 4


def test_a_wait_parts_two_runs_of_one_name():
    """Back-to-back steps of one request draw as one box; a rank idle between two spans of
    the same name (a micro-batch's next step, a patch after the warm-up) draws two."""
    spans = [Span(0, "compute", "m0", a * MS, b * MS) for a, b in ((0, 10), (10, 20), (40, 50))]
    ax = plot_timeline(merge([RankTrace(0, "h", 0, spans)]))
    assert sorted(round(p.get_width()) for p in ax.patches) == [10, 20]


def _span(kind: str, name: str, start_ms: float, end_ms: float, rank: int = 0) -> Span:
    return Span(rank, kind, name, int(start_ms * 1e6), int(end_ms * 1e6), {})


def _one_lane(*spans: Span):
    return merge([RankTrace(0, "h", 0, list(spans), [])])


def test_short_spans_stay_visible_and_labels_only_where_they_fit():
    t = _one_lane(_span("compute", "r0", 0, 500), _span("send", "", 500, 500.5),
                  _span("compute", "a label far too long for its block", 501, 506),
                  _span("compute", "r2", 506, 1000))
    ax = plot_timeline(t)
    send = [p for p in ax.patches if p.get_height() == pytest.approx(0.3)]
    assert len(send) == 1 and send[0].get_width() > 1.5  # 0.5 ms drawn as 3 px of ~1000 ms
    assert {x.get_text() for x in ax.texts} == {"r0", "r2"}
    zoomed = plot_timeline(t, window=(499, 507))  # enlarged: now the long label fits
    assert "a label far too long for its block" in {x.get_text() for x in zoomed.texts}
    sends = [p for p in zoomed.patches if p.get_height() == pytest.approx(0.3)]
    assert sends[0].get_width() == pytest.approx(0.5)  # at this scale: its true width


def test_legend_names_only_what_is_drawn_and_shades_alternate_over_compute():
    t = _one_lane(_span("compute", "r0", 0, 10), _span("recv", "", 10, 20),
                  _span("compute", "r1", 20, 30), _span("recv", "", 30, 40),
                  _span("compute", "r2", 40, 50))
    ax = plot_timeline(t, kinds=("compute",))
    assert [x.get_text() for x in ax.get_legend().get_texts()] == [
        "compute (two shades: neighbours)"]
    assert [p.get_alpha() for p in ax.patches] == [1.0, 0.65, 1.0]  # recv did not count
    assert len(plot_timeline(t).get_legend().get_texts()) == 2


def test_collectives_inside_a_step_neither_split_it_nor_vanish():
    t = _one_lane(_span("compute", "r0", 0, 10), _span("collective", "all-reduce", 4, 4.01),
                  _span("compute", "r0", 10, 20), _span("collective", "all-reduce", 14, 14.01))
    ax = plot_timeline(t)
    assert len(ax.patches) == 3  # one merged r0 block, two all-reduces drawn over it
    # at their true width: widened to 3 px, dozens per step would paint the step red
    assert sorted(p.get_width() for p in ax.patches)[:2] == [pytest.approx(0.01)] * 2
