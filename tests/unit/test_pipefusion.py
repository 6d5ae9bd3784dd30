"""PipeFusion's plan (patches as the micro-batches, warm-up steps whole), its bubble formula
against the simulated clock, and block splits recomputed from measured per-rank time."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from ppdit.analysis.bubbles import pipefusion_bubble
from ppdit.checkpoint.source import ModelSource
from ppdit.parallel.layer_split.schedule import LayerSplitPlan, sim_bubble, simulate
from ppdit.parallel.layout import Layout, parse_layout
from ppdit.parallel.partition import balanced_sizes, rebalanced_sizes
from ppdit.parallel.runner import LayoutPlan, loop_plan
from ppdit.presets import get_preset
from ppdit.sampler import Request, SamplingConfig
from tests.support.streamdiffusion import bottleneck, their_sizes


def pipefusion(stages=2, patches=4, steps=4, warmup=1, **kw) -> LayerSplitPlan:
    plan = LayoutPlan(layout=Layout(pipefusion=stages), sampling=SamplingConfig(num_steps=steps),
                      patches=patches, warmup_steps=warmup, **kw)
    return loop_plan(plan)


def test_a_pipefusion_layout_is_layer_splits_plan_over_patches():
    plan = pipefusion()
    assert plan.layout == parse_layout("pipefusion=2") and plan.patches == 4
    assert [plan.micros(s) for s in range(4)] == [1, 4, 4, 4]  # step 0 whole
    assert plan.patch(0, 0) == slice(0, plan.tokens)
    cuts = [plan.patch(1, m) for m in range(4)]
    assert cuts[0].start == 0 and cuts[-1].stop == plan.tokens
    assert all(a.stop == b.start for a, b in itertools.pairwise(cuts))
    assert len(plan.tasks(0)) == 1 + 3 * 4


@pytest.mark.parametrize(("stages", "patches", "steps", "warmup"),
                         [(2, 4, 4, 0), (2, 4, 4, 1), (3, 2, 5, 2), (4, 8, 3, 3), (2, 2, 6, 0)])
def test_the_bubble_formula_equals_the_simulated_clock(stages, patches, steps, warmup):
    """A patch costs 1/M of a whole step's chunk: the real task orders and release rules on a
    simulated clock give exactly the formula's idle share."""
    plan = replace(pipefusion(stages, patches, steps, warmup), source=ModelSource("wan2.1-14b"))
    spans = simulate(plan, lambda rank, task: 1 / plan.micros(task.step))
    assert sim_bubble(spans, stages) == pytest.approx(
        pipefusion_bubble(patches, stages, steps, warmup))


def test_what_pipefusion_cannot_run_is_refused_in_one_line():
    with pytest.raises(ValueError, match="one timestep per sample"):
        pipefusion(source=ModelSource("tiny-ti2v"), latent_shape=(1, 48, 3, 8, 8))
    with pytest.raises(ValueError, match="must equal patches=4"):
        LayerSplitPlan((Request(0, 0),), 2, 2, patches=4)
    with pytest.raises(ValueError, match="pipefusion stands alone"):
        parse_layout("pipefusion=2,cfg=2")
    with pytest.raises(ValueError, match="do not compose"):
        parse_layout("pipefusion=2,layer=2")


def test_a_measured_round_moves_blocks_off_the_rank_that_also_decodes():
    """Rank 0 spent 4 s on its 20 blocks and decoded for 3 s more; rank 1 spent 4 s on its
    20: recomputed, rank 0 keeps fewer blocks and the slowest rank is faster."""
    sizes, rank_s, block_s = [20, 20], [7.0, 4.0], [4.0, 4.0]
    new = rebalanced_sizes(sizes, rank_s, block_s)
    costs, extra = [0.2] * 40, [3.0, 0.0]
    assert new[0] < 20 and sum(new) == 40
    assert bottleneck(new, costs, extra) < bottleneck(sizes, costs, extra) == pytest.approx(7.0)


def test_the_exact_split_is_never_slower_than_streamdiffusion_v2s_rule():
    """On cases drawn here (ranks of unequal speed, a decoding rank, uneven blocks), the
    exact partition's slowest rank is never slower than StreamDiffusionV2's rounding rule's,
    judged on what the round measured (a block costs its rank's time per block). Cases where
    their rule empties a rank (a stage that only decodes) are skipped: ppdit's stages each
    hold a block (``check_layer_stages``), so those are not the same question."""
    rng, wins = random.Random(53), 0
    for _ in range(300):
        ranks = rng.randint(2, 5)
        blocks = rng.randint(ranks, 40)
        sizes = balanced_sizes([1.0] * blocks, ranks)
        speed = [rng.uniform(0.5, 2.0) for _ in range(ranks)]
        costs = [speed[r] for r, n in enumerate(sizes) for _ in range(n)]
        extra = [rng.uniform(0, 5) if r == 0 else rng.uniform(0, 0.5) for r in range(ranks)]
        block_s = [sum(costs[sum(sizes[:r]):sum(sizes[:r + 1])]) for r in range(ranks)]
        rank_s = [b + e for b, e in zip(block_s, extra, strict=True)]
        ours = bottleneck(rebalanced_sizes(sizes, rank_s, block_s), costs, extra)
        their = their_sizes(sizes, rank_s, block_s)
        if 0 in their:
            continue
        theirs = bottleneck(their, costs, extra)
        assert ours <= theirs + 1e-9
        wins += ours < theirs - 1e-9
    assert wins > 30  # and it is not a tie by construction


def test_the_wan_presets_give_pipefusion_patches():
    assert get_preset("wan2.1-1.3b").num_tokens() >= 4


@pytest.mark.parametrize("sizes", [[3, 5], [1, 7], [4, 4], [2, 3, 3], [1, 1, 6]])
def test_forced_costs_give_the_split_they_were_made_from(sizes):
    """A rebalanced split reaches a layer-split plan as block costs (``forced_costs``)."""
    from ppdit.parallel.partition import forced_costs

    assert balanced_sizes(list(forced_costs(sizes)), len(sizes)) == sizes
    plan = LayerSplitPlan((Request(0, 0),), 2, 1, source=ModelSource("small"),
                          block_costs=forced_costs([3, 5]))
    assert [len(c[0]) for c in plan.chunks()] == [3, 5]
