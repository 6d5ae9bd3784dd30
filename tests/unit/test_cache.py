"""Step caching (``ppdit.cache``): First-Block-Cache on the one loop equals diffusers' own
``enable_cache(FirstBlockCacheConfig(threshold))`` bit for bit, skips what the threshold says,
keeps its state per request and branch, and refuses what it cannot decide once. On ranks
(Ulysses, step split with the state in the handoff): tests/ranks/test_t2v.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from ppdit.cache import BlockCache, CacheConfig
from ppdit.model import own_memory
from ppdit.parallel.forward import ForwardStack
from ppdit.parallel.layout import parse_layout
from ppdit.parallel.runner import LayoutPlan, run_requests
from ppdit.t2v.generate import encode, generate, prepare
from tests.support.pipelines import spec_for

STEPS = 8


def _skipped(folder, threshold):
    """The (step, branch) forwards the loop skipped on the single device."""
    spec = spec_for(folder, num_steps=STEPS, cache_threshold=threshold)
    plan = replace(prepare(spec).plan, prompts=(encode(spec),))
    stack = ForwardStack(None, plan, None, plan.source.dit())
    den = stack.denoiser()
    run_requests(plan, stack, den)
    return [(step, branch) for _, step, branch, computed in den.cache.log if not computed]


def _diffusers_cached(folder, spec):
    from diffusers import WanPipeline
    from diffusers.hooks import FirstBlockCacheConfig

    pipe = WanPipeline.from_pretrained(folder, local_files_only=True)
    for module in (pipe.transformer, pipe.text_encoder, pipe.vae):
        own_memory(module)  # aligned weights, as ppdit loads them (test_t2v.UNALIGNED_TOL)
    pipe.set_progress_bar_config(disable=True)
    pipe.transformer.enable_cache(FirstBlockCacheConfig(threshold=spec.cache_threshold))
    return pipe(spec.prompt, negative_prompt=spec.negative_prompt,
                num_inference_steps=spec.num_steps, num_frames=spec.num_frames,
                height=spec.height, width=spec.width, guidance_scale=spec.guidance_scale,
                generator=torch.Generator().manual_seed(spec.seed), output_type="pt").frames


@pytest.mark.parametrize("threshold", [0.05, 0.1])
def test_first_block_cache_equals_diffusers_enable_cache(folders, threshold):
    """At 0.05 nothing is skipped on this folder; at 0.1 steps 1, 2, 4 and 5 skip both
    branches: either way the video is diffusers' bit for bit, and skipping changed it."""
    folder = folders["unipc"]
    spec = spec_for(folder, num_steps=STEPS, cache_threshold=threshold)
    ours = generate(spec).video
    assert torch.equal(ours, _diffusers_cached(folder, spec))
    skipped = _skipped(folder, threshold)
    plain = generate(replace(spec, cache_threshold=None)).video
    if threshold == 0.05:
        assert skipped == [] and torch.equal(ours, plain)
    else:
        assert skipped == [(s, b) for s in (1, 2, 4, 5) for b in (0, 1)]
        assert not torch.equal(ours, plain)


def test_the_state_is_per_request_and_a_batch_is_refused(tiny):
    cache = BlockCache(CacheConfig(0.1))
    with pytest.raises(ValueError, match="a batch of 2 requests would share one decision"):
        cache.begin([0, 1], 0)
    cache.states[(3, 0, 0)] = cache.states[(3, 0, 1)] = cache.states[(4, 0, 0)] = (None, None)
    assert set(cache.export(3)) == {(0, 0), (0, 1)} and set(cache.states) == {(4, 0, 0)}
    with pytest.raises(ValueError, match="threshold=-1 must be >= 0"):
        CacheConfig(-1)


@pytest.mark.parametrize("layout", ["layer=2", "ulysses=2,fsdp=2"])
def test_caching_refuses_layouts_whose_ranks_could_not_skip_together(layout):
    with pytest.raises(ValueError, match="step caching runs on one device, step split"):
        LayoutPlan(parse_layout(layout), cache=CacheConfig(0.1))
