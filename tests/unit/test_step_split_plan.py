"""Step splitting and plan validation: pure logic, no ranks."""

from __future__ import annotations

import itertools

import pytest

from ppdit.checkpoint.source import ModelSource
from ppdit.parallel.forward import StackRunner
from ppdit.parallel.layout import Layout
from ppdit.parallel.runner import LayoutPlan
from ppdit.parallel.step_split.plan import StepSplitPlan, make_plan, split_steps
from ppdit.sampler import Request, SamplingConfig


@pytest.mark.parametrize("steps,stages,sizes", [
    (28, 1, [28]), (28, 2, [14, 14]), (28, 4, [7, 7, 7, 7]), (28, 7, [4] * 7),
    (7, 3, [3, 2, 2]), (10, 4, [3, 3, 2, 2]), (5, 5, [1] * 5),
])
def test_even_splits_are_contiguous_and_balanced(steps, stages, sizes):
    ranges = split_steps(steps, stages)
    assert [len(r) for r in ranges] == sizes
    assert [i for r in ranges for i in r] == list(range(steps))


def _brute_force_bottleneck(weights, stages):
    n, best = len(weights), float("inf")
    for cuts in itertools.combinations(range(1, n), stages - 1):
        bounds = (0, *cuts, n)
        best = min(best, max(sum(weights[a:b]) for a, b in itertools.pairwise(bounds)))
    return best


@pytest.mark.parametrize("weights,stages", [
    ([2, 2, 2, 1, 1, 1, 1, 1], 2), ([2, 2, 2, 1, 1, 1, 1, 1], 3), ([5, 1, 1, 1, 1, 1], 2),
    ([1, 3, 1, 3, 1, 3, 1], 4), ([1.0] * 9, 4),
])
def test_weighted_split_minimises_the_slowest_stage(weights, stages):
    ranges = split_steps(len(weights), stages, weights)
    assert [i for r in ranges for i in r] == list(range(len(weights)))
    worst = max(sum(weights[i] for i in r) for r in ranges)
    assert worst == pytest.approx(_brute_force_bottleneck(weights, stages))


def test_guided_steps_push_work_to_later_stages():
    cfg = SamplingConfig(num_steps=28, guidance_scale=5.0, guidance_steps=14)
    even = split_steps(28, 2)
    weighted = split_steps(28, 2, cfg.step_costs())
    assert len(even[0]) == 14 and len(weighted[0]) < 14


def test_fewer_steps_than_stages_names_the_rule():
    with pytest.raises(ValueError, match=r"num_steps=3 cannot be split over 4 stages.*"
                                         r"num_steps >= num_stages"):
        split_steps(3, 4)
    with pytest.raises(ValueError, match="num_steps=3 cannot be split over 4 stages"):
        make_plan(4, 1, sampling=SamplingConfig(num_steps=3))


@pytest.mark.parametrize("kwargs,match", [
    ({"weights": [1, 1]}, "weights must hold 4 positive per-step costs"),
    ({"weights": [1, 0, 1, 1]}, "weights must hold 4 positive"),
])
def test_bad_weights(kwargs, match):
    with pytest.raises(ValueError, match=match):
        split_steps(4, 2, **kwargs)


@pytest.mark.parametrize("kwargs,match", [
    ({"mode": "turbo"}, "mode='turbo' is not one of"),
    ({"micro_batch": 3}, "4 requests cannot be dealt to replicas=1 in groups of micro_batch=3"),
    ({"replicas": 3}, "cannot be dealt to replicas=3"),
    ({"mode": "stream_batch", "micro_batch": 2}, "micro_batch must be 1"),
    ({"max_in_flight": 0}, "max_in_flight=0 must be >= 1"),
    ({"solver": "folder"}, "runs a pipeline folder's scheduler, but the model source is"),
    ({"cfg": "twice"}, "cfg='twice' is not one of"),
    ({"prompts": ()}, "0 prompts for 4 requests"),
])
def test_bad_plans(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_plan(2, 4, sampling=SamplingConfig(num_steps=4), **kwargs)


def test_bad_model_sources_name_the_rule(tmp_path):
    with pytest.raises(ValueError, match="unknown model preset 'huge'"):
        ModelSource("huge")
    with pytest.raises(ValueError, match="dtype='fp12' is not one of"):
        ModelSource(dtype="fp12")
    with pytest.raises(ValueError, match="is not a folder"):
        ModelSource(folder=str(tmp_path / "nowhere"))
    assert ModelSource("tiny", seed=1) == ModelSource("tiny", seed=1) != ModelSource("tiny")


def test_stages_must_cover_every_step_once():
    reqs = (Request(0, 0),)
    with pytest.raises(ValueError, match="must cover steps 0..3 contiguously"):
        StepSplitPlan(reqs, (range(0, 2), range(3, 4)), SamplingConfig(num_steps=4))
    with pytest.raises(ValueError, match="at least one step per stage"):
        StepSplitPlan(reqs, (range(0, 4), range(4, 4)), SamplingConfig(num_steps=4))


def test_groups_deal_requests_to_replicas():
    plan = make_plan(1, 8, sampling=SamplingConfig(num_steps=2), replicas=2, micro_batch=2)
    ids = [[[r.request_id for r in g] for g in plan.groups(k)] for k in range(2)]
    assert ids == [[[0, 2], [4, 6]], [[1, 3], [5, 7]]]
    assert plan.world_size == 2
    assert plan.frame_spec().shape == (1, 2, 16, 5, 16, 16)  # one slot: Euler has no memory


def test_the_reports_dummy_model_plans_on_any_stages():
    """The report's stand-in has no blocks: the model's rules for blocks apply only to a layer
    split, and a step split of it plans like any other model's (lesson 01 runs it)."""
    for stages in (1, 2, 4):
        plan = make_plan(stages, 1, sampling=SamplingConfig(num_steps=28),
                         source=ModelSource("dummy"), warmup=0)
        assert plan.world_size == stages


def test_v_major_is_refused_under_a_pipeline_axis():
    """V-Major's copies are per request, reset by the request-by-request loop only: a step
    split's stages would compare against the previous request's V."""
    with pytest.raises(ValueError, match="v_major=0.1 needs a Ulysses-only layout without a "
                                         "pipeline axis"):
        make_plan(2, 1, stage=Layout(ulysses=2), v_major=0.1)


def test_fsdp_beside_another_layout_is_refused_by_every_stack_runner():
    """FSDP shards the rank's one model in place: a job whose plans differ in layout would hand
    the sharded model to the others (checked before any group is made)."""
    fsdp = LayoutPlan(Layout(ulysses=2, fsdp=True))
    with pytest.raises(ValueError, match="FSDP shards the rank's one model in place"):
        StackRunner(None, (fsdp, LayoutPlan(Layout(ulysses=2))))
    with pytest.raises(ValueError, match="FSDP shards the rank's one model in place"):
        StackRunner(None, (make_plan(2, 1, stage=Layout(ulysses=2, fsdp=True)),
                           make_plan(2, 1, stage=Layout(ulysses=2))))
