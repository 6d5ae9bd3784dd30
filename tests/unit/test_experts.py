"""Wan 2.2's two experts (``model.Experts``, ``sampler.expert_steps``): a two-expert folder of a
shape no other test uses generates what diffusers' ``WanPipeline`` generates with
``transformer_2``, ``boundary_ratio`` and ``guidance_scale_2``, bit for bit; the stage cut at
the boundary; what a rank holds. Step split on ranks: tests/ranks/test_t2v.py."""

from __future__ import annotations

import pytest
import torch

from ppdit.checkpoint.solver import step_experts
from ppdit.checkpoint.source import ModelSource
from ppdit.checkpoint.tiny import build_tiny_pipeline
from ppdit.model import Experts
from ppdit.parallel.runner import loop_plan
from ppdit.parallel.step_split.plan import expert_stages
from ppdit.runtime.fit import weight_bytes
from ppdit.sampler import SamplingConfig, expert_steps
from ppdit.t2v.generate import generate, prepare
from tests.support.pipelines import MOE_SHAPE, spec_for, wan_pipeline


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    """A tiny two-expert folder switching at T2V A14B's boundary (0.875), A14B's UniPC."""
    return build_tiny_pipeline(tmp_path_factory.mktemp("moe") / "moe", seed=5, preset=MOE_SHAPE,
                               boundary_ratio=0.875)


def test_two_experts_equal_wan_pipeline(moe):
    """Both experts run (6 steps at shift 12: 4 high-noise, 2 low-noise), each with its own
    guidance scale: the video equals WanPipeline's bit for bit (within 1e-5 is the bar)."""
    spec = spec_for(moe, num_steps=6, guidance_scale=5.0, guidance_scale_2=2.0)
    assert step_experts(prepare(spec).plan) == [0, 0, 0, 0, 1, 1]
    ours = generate(spec).video
    ref = wan_pipeline(moe, spec)
    assert torch.equal(ours, ref)
    # the second expert's own scale matters: another scale is another video
    one = generate(spec_for(moe, num_steps=6, guidance_scale=5.0, guidance_scale_2=5.0)).video
    assert not torch.equal(one, ours)


def test_the_boundary_cuts_the_stages_and_a_stage_holds_one_expert(moe):
    """T2V A14B's 40 steps at shift 12: 26 high-noise, 14 low-noise (the real scheduler's
    timesteps); two stages cut there, three give the longer expert two."""
    from ppdit.checkpoint.solver import SchedulerSolver
    from ppdit.checkpoint.tiny import tiny_unipc_scheduler

    times = SchedulerSolver(tiny_unipc_scheduler(12.0), 40).timesteps.tolist()
    experts = expert_steps(times, 875.0)
    assert experts.count(0) == 26 and experts.count(1) == 14
    assert [len(r) for r in expert_stages(experts, 2)] == [26, 14]
    assert [len(r) for r in expert_stages(experts, 3)] == [13, 13, 14]
    assert [len(r) for r in expert_stages([0] * 6, 2)] == [3, 3]  # one expert: even
    plan = loop_plan(prepare(spec_for(moe, "step", 2, num_steps=6)).plan)
    assert [list(r) for r in plan.stages] == [[0, 1, 2, 3], [4, 5]]
    source = ModelSource(folder=str(moe))
    whole, one = (weight_bytes(source, split=s) for s in ({}, {"step": 2}))
    assert whole == 2 * one > 0
    held = source.dit(experts=[1])
    assert isinstance(held, Experts) and list(held.held) == ["1"]
    with pytest.raises(ValueError, match="expert 0 is not on this rank, which holds experts"):
        held.expert(0)


def test_two_experts_refuse_what_is_not_built(moe):
    with pytest.raises(ValueError, match="two experts run on every layout but layer split"):
        prepare(spec_for(moe, "layer", 2))
    with pytest.raises(ValueError, match="guidance_scale_2=2.0 is the second expert's scale"):
        SamplingConfig(guidance_scale_2=2.0)
