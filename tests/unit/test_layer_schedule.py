"""Layer-split schedules without ranks: partitions, message orders, and bubbles on a simulated
clock driven by the same task orders and wrap rules the real ranks use."""

from __future__ import annotations

import pytest

from ppdit.analysis.bubbles import layer_split_bubble
from ppdit.checkpoint.source import ModelSource
from ppdit.parallel.layer_split.schedule import (
    LayerSplitPlan,
    input_message,
    messages_sent,
    sender_of,
    sim_bubble,
    simulate,
)
from ppdit.sampler import Request, SamplingConfig

REQS = tuple(Request(i, i) for i in range(8))


def _plan(p, m, v=1, wrap=True, steps=3, preset=None, **kw):
    preset = preset or ("tiny" if p * v <= 4 else "small")
    return LayerSplitPlan(REQS, p, m, v, wrap, SamplingConfig(num_steps=steps),
                          source=ModelSource(preset), **kw)


@pytest.mark.parametrize("p,v", [(2, 1), (3, 1), (4, 1), (2, 2), (3, 2), (4, 2)])
@pytest.mark.parametrize("wrap", [False, True])
def test_simulated_bubble_matches_the_formula(p, v, wrap):
    """Balanced stages, unit cost per stage: the schedule's idle share equals the formula
    (within 2 percentage points; on this clock it is exact) for every M from 1 to 8."""
    for m in range(1, 9):
        plan = _plan(p, m, v, wrap, preset="small")
        measured = sim_bubble(simulate(plan, lambda rank, task: 1 / v), p)
        assert measured == pytest.approx(layer_split_bubble(m, p, v, 3, wrap), abs=0.02), (m,)


def test_formula_reduces_to_gpipe_and_megatron():
    assert layer_split_bubble(4, 2) == pytest.approx(1 / 5)  # (P-1)/(M+P-1)
    assert layer_split_bubble(8, 4, virtual=2) == pytest.approx(3 / 19)  # (P-1)/(VM+P-1)
    # wrapping across N steps pays the fill once: (P-1)/(N M + P-1) for M >= P
    assert layer_split_bubble(4, 2, steps=10, wrap=True) == pytest.approx(1 / 41)


def test_wrap_beats_flush_and_interleaving_beats_neither_below_p():
    flush, wrap = (sim_bubble(simulate(_plan(2, 4, wrap=w), lambda r, t: 1.0), 2)
                   for w in (False, True))
    assert wrap < flush
    one, two = (sim_bubble(simulate(_plan(2, 4, v, wrap=False, preset="small"),
                                    lambda r, t, v=v: 1 / v), 2) for v in (1, 2))
    assert two < one


def test_every_input_is_sent_exactly_once_by_its_sender():
    for plan in (_plan(3, 5), _plan(2, 3, 2), _plan(4, 2, 2, wrap=False), _plan(1, 3, 2)):
        sent = {r: messages_sent(plan, r) for r in range(plan.num_stages)}
        for rank in range(plan.num_stages):
            needed = [input_message(plan, rank, t) for t in plan.tasks(rank)]
            needed = [m for m in needed if m is not None]
            for msg in needed:
                src = sender_of(plan, rank, msg)
                assert sent[src].count((rank, msg)) == 1, (rank, msg)
            received = [m for src in sent for dst, m in sent[src] if dst == rank]
            assert sorted(map(repr, received)) == sorted(map(repr, needed))


def test_chunks_cover_blocks_round_robin_and_balance_costs():
    plan = _plan(2, 2, 2, preset="small")  # 8 blocks, 4 chunks
    assert plan.chunks() == [[range(0, 2), range(4, 6)], [range(2, 4), range(6, 8)]]
    uneven = _plan(3, 2, 1, preset="small")  # 8 blocks over 3 stages
    assert [len(c[0]) for c in uneven.chunks()] == [3, 3, 2]
    costs = (4.0, 1, 1, 1, 1, 1, 1, 2)
    weighted = _plan(2, 2, 1, preset="small", block_costs=costs)
    assert weighted.chunks() == [[range(0, 3)], [range(3, 8)]]  # costs 6 and 6


def test_micro_batches_split_samples_and_cfg_halves():
    plan = LayerSplitPlan(REQS[:3], 2, 4, sampling=SamplingConfig(num_steps=2, guidance_scale=4))
    rows = [[(s.request, s.half) for s in plan.micro_samples(m)] for m in range(4)]
    assert rows == [[(0, 0), (0, 1)], [(1, 0), (1, 1)], [(2, 0)], [(2, 1)]]
    assert plan.micro_requests(2) == [2]


@pytest.mark.parametrize("kwargs,match", [
    ({"num_stages": 5, "micro_batches": 1},
     "layer-split over 5 stages needs at least one block per stage, but 'tiny' has 4"),
    ({"num_stages": 2, "micro_batches": 1, "virtual": 3}, r"V\*P <= blocks"),
    ({"num_stages": 2, "micro_batches": 0}, "micro_batches=0 must be between 1 and"),
    ({"num_stages": 2, "micro_batches": 9}, "micro_batches=9 must be between 1 and the number"),
    ({"num_stages": 0, "micro_batches": 1}, "num_stages=0 and virtual=1 must be >= 1"),
])
def test_bad_layer_split_plans(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LayerSplitPlan(REQS, sampling=SamplingConfig(num_steps=2), **kwargs)


def test_partial_guidance_is_refused():
    with pytest.raises(ValueError, match="guidance_steps must be None"):
        LayerSplitPlan(REQS, 2, 2, sampling=SamplingConfig(num_steps=4, guidance_scale=3.0,
                                                            guidance_steps=2))


def test_schedule_figure_reports_simulated_and_formula_bubbles():
    import matplotlib

    matplotlib.use("Agg")
    from ppdit.viz.schedules import schedule_figure

    title = schedule_figure(4, 8, 2, 2, wrap=False).axes[0].get_title(loc="left")
    expected = f"{layer_split_bubble(8, 4, 2, 2):.1%}"
    assert f"bubble {expected}" in title and f"balanced stages {expected}" in title
    slowed = schedule_figure(3, 3, 1, 3, wrap=True, last_stage_slowdown=0.3)
    assert "last stage 1.30x" in slowed.axes[0].get_title(loc="left")


def test_schedule_multiples_draw_each_setting_as_the_figure_would():
    import matplotlib

    matplotlib.use("Agg")
    from ppdit.viz.schedules import schedule_figure, schedule_multiples

    settings = [dict(num_stages=4, micro=2), dict(num_stages=3, micro=4, wrap=True)]
    fig = schedule_multiples(settings)
    assert [ax.get_title(loc="left") for ax in fig.axes] == [
        schedule_figure(**s).axes[0].get_title(loc="left") for s in settings]
    assert fig.axes[0].get_xlim() == fig.axes[1].get_xlim()  # one time scale


def test_explorer_has_its_controls():
    from ppdit.viz.schedules import make_explorer

    box = make_explorer()
    controls = [c for row in box.children[:2] for c in row.children]
    assert [c.description for c in controls] == ["P stages", "M micro", "V chunks", "steps",
                                                 "wrap across steps", "last slower"]


def test_explorer_redraws_one_picture_even_when_changes_race():
    """JupyterLab may deliver widget changes on several threads at once: the output must hold
    exactly one picture, drawn from the last values, and an impossible choice one line."""
    import threading

    import ipywidgets as w
    import matplotlib

    matplotlib.use("Agg")
    from ppdit.viz import explorer
    from ppdit.viz.schedules import make_explorer

    box = make_explorer()
    micro, out = box.children[0].children[1], box.children[-1]
    threads = [threading.Thread(target=setattr, args=(micro, "value", m)) for m in (5, 6, 7, 8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out.outputs) == 1 and "image/png" in out.outputs[0]["data"]
    assert "Schedule explorer" in repr(box) and "VBox(" not in repr(box)
    # a viewer without a kernel shows 110 characters: the instruction must fit in them
    assert repr(box).endswith("run the cells above to use it") and len(repr(box)) <= 110

    def draw(n):
        if n > 2:
            raise ValueError(f"n={n} is too big")
        return schedule_figure(2, 2, 1, 1)

    from ppdit.viz.schedules import schedule_figure

    n = w.IntSlider(value=1)
    small = explorer.make_explorer({"n": n}, draw, rows=(1,), summary="test")
    n.value = 3
    assert small.children[-1].outputs == (explorer.text_output("not possible: n=3 is too big"),)
    with pytest.raises(ValueError, match="more than ipywidgets shows"):
        explorer.make_explorer({"n": n}, draw, rows=(1,), summary="x" * 100)
