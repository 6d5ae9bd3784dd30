"""Per-rank memory measured on live ranks: step split keeps the whole model on every rank, layer
split divides it (the earlier report's memory claim, lesson 03 §8)."""

from __future__ import annotations

from ppdit.analysis.memory_measure import measure_memory
from ppdit.model import build_model
from ppdit.parallel.layer_split.ranks import build_stage_model
from ppdit.parallel.layer_split.schedule import LayerSplitPlan
from ppdit.parallel.layout import Layout
from ppdit.parallel.runner import LayoutPlan
from ppdit.parallel.step_split.plan import make_plan
from ppdit.runtime.observe.memory import held_bytes
from ppdit.sampler import Request, SamplingConfig


def test_step_split_ranks_hold_the_model_and_layer_split_ranks_a_share(pools):
    sampling = SamplingConfig(num_steps=2)
    full = held_bytes(build_model("tiny", seed=0))
    layer_plan = LayerSplitPlan((Request(0, 0),), 2, 1, wrap=False, sampling=sampling)
    got = measure_memory({"one": LayoutPlan(Layout(), sampling=sampling),
                          "step": make_plan(2, 1, sampling=sampling), "layer": layer_plan,
                          "tp": LayoutPlan(Layout(tp=2), sampling=sampling)},
                         pool=pools(2), echo=False)
    one = got["one"][0]
    assert one.weight_bytes == full and one.peak_bytes > 0
    for m in got["step"].values():  # every step-split rank: the whole model, one step's peak
        assert m.weight_bytes == full
        assert m.total_bytes >= 0.95 * one.total_bytes
    for rank, m in got["layer"].items():  # each layer-split rank: exactly its stage model
        assert m.weight_bytes == held_bytes(build_stage_model(layer_plan, rank))
        assert m.weight_bytes < 0.8 * full
    for m in got["tp"].values():  # a TP rank: its shards of the blocks, the rest whole
        assert 0.5 * full < m.weight_bytes < 0.8 * full
