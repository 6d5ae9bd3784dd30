"""Step caching (``ppdit.cache``): First-Block-Cache on the one loop equals diffusers' own
``enable_cache(FirstBlockCacheConfig(threshold))`` bit for bit, skips what the threshold says,
keeps its state per request and branch, and refuses what it cannot decide once. On ranks
(Ulysses, step split with the state in the handoff): tests/ranks/test_t2v.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from ppdit.cache import BlockCache, CacheConfig
from ppdit.parallel.forward import ForwardStack
from ppdit.parallel.layout import parse_layout
from ppdit.parallel.runner import LayoutPlan, run_requests
from ppdit.t2v.generate import encode, generate, prepare
from tests.support.pipelines import spec_for, wan_pipeline

STEPS = 8


def _skipped(folder, threshold):
    """The (step, branch) forwards the loop skipped on the single device."""
    spec = spec_for(folder, num_steps=STEPS, cache_threshold=threshold)
    plan = replace(prepare(spec).plan, prompts=(encode(spec),))
    stack = ForwardStack(None, plan, None, plan.source.dit())
    den = stack.denoiser()
    run_requests(plan, stack, den)
    return [(step, branch) for _, step, branch, computed in den.cache.log if not computed]


@pytest.mark.parametrize("threshold", [0.05, 0.1])
def test_first_block_cache_equals_diffusers_enable_cache(folders, threshold):
    """At 0.05 nothing is skipped on this folder; at 0.1 steps 1, 2, 4 and 5 skip both
    branches: either way the video is diffusers' bit for bit, and skipping changed it."""
    folder = folders["unipc"]
    spec = spec_for(folder, num_steps=STEPS, cache_threshold=threshold)
    ours = generate(spec).video
    from diffusers.hooks import FirstBlockCacheConfig

    assert torch.equal(ours, wan_pipeline(folder, spec,
                                          cache=FirstBlockCacheConfig(threshold=threshold)))
    skipped = _skipped(folder, threshold)
    plain = generate(replace(spec, cache_threshold=None)).video
    if threshold == 0.05:
        assert skipped == [] and torch.equal(ours, plain)
    else:
        assert skipped == [(s, b) for s in (1, 2, 4, 5) for b in (0, 1)]
        assert not torch.equal(ours, plain)


# MagCache's per-step residual magnitude ratios (a calibration; these are made up): with
# threshold 0.06 the accumulated error allows steps 2-4 and 6 to skip (retention: 0-1 run).
MAG_RATIOS = (1.0, 0.99, 0.995, 0.99, 0.98, 0.99, 0.97, 0.95)


def test_magcache_equals_diffusers_mag_cache(folders):
    """MagCache's schedule-driven skips, every block skipped on steps 2, 3, 4 and 6: the
    latent equals diffusers' ``enable_cache(MagCacheConfig(...))`` bit for bit."""
    from diffusers.hooks import MagCacheConfig

    folder = folders["unipc"]
    spec = spec_for(folder, num_steps=STEPS)
    plan = replace(prepare(spec).plan, prompts=(encode(spec),),
                   cache=CacheConfig(0.06, "mag", MAG_RATIOS))
    stack = ForwardStack(None, plan, None, plan.source.dit())
    den = stack.denoiser()
    ours = run_requests(plan, stack, den)[0]
    assert sorted({s for _, s, _, c in den.cache.log if not c}) == [2, 3, 4, 6]
    ref = wan_pipeline(folder, spec, output_type="latent", cache=MagCacheConfig(
        threshold=0.06, mag_ratios=list(MAG_RATIOS), num_inference_steps=STEPS))
    assert torch.equal(ours, ref)
    with pytest.raises(ValueError, match="mag_ratios hold 8 values: give one per step"):
        replace(plan, sampling=replace(plan.sampling, num_steps=4))


def test_the_state_is_per_request_and_a_batch_is_refused(tiny):
    cache = BlockCache(CacheConfig(0.1))
    with pytest.raises(ValueError, match="a batch of 2 requests would share one decision"):
        cache.begin([0, 1], 0)
    cache.states[(3, 0, 0)] = cache.states[(3, 0, 1)] = cache.states[(4, 0, 0)] = (None, None)
    assert set(cache.export(3)) == {(0, 0), (0, 1)} and set(cache.states) == {(4, 0, 0)}
    with pytest.raises(ValueError, match="threshold=-1 must be >= 0"):
        CacheConfig(-1)
    with pytest.raises(ValueError, match="MagCache needs mag_ratios, one per step"):
        CacheConfig(0.1, "mag")


@pytest.mark.parametrize("layout", ["layer=2", "ulysses=2,fsdp"])
def test_caching_refuses_layouts_whose_ranks_could_not_skip_together(layout):
    with pytest.raises(ValueError, match="step caching runs on one device, step split"):
        LayoutPlan(parse_layout(layout), cache=CacheConfig(0.1))


def test_a_step_split_balances_the_cached_costs():
    """Skips late in the schedule (MagCache: free) make an even 4 + 4 split uneven, 8 forwards
    against 2; the cost-weighted split moves the cut to balance them."""
    from ppdit.parallel.step_split.plan import split_steps

    log = [(0, s, b, s < 4 or s == 7) for s in range(8) for b in (0, 1)]  # BlockCache.log
    costs = [0.0] * 8  # each step's cost in forwards; a skipped one is free
    for _, step, _, computed in log:
        costs[step] += 1.0 if computed else 0.0
    assert costs == [2, 2, 2, 2, 0, 0, 0, 2]
    assert [sum(costs[i] for i in r) for r in split_steps(8, 2)] == [8, 2]
    assert [sum(costs[i] for i in r) for r in split_steps(8, 2, weights=[c + 1e-3 for c in costs])
            ] in ([6, 4], [4, 6])
