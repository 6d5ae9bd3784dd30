"""Wan 2.2's two experts (``model.Experts``, ``sampler.expert_steps``): a two-expert folder of a
shape no other test uses generates what diffusers' ``WanPipeline`` generates with
``transformer_2``, ``boundary_ratio`` and ``guidance_scale_2``, bit for bit; the stage cut at
the boundary; what a rank holds. Step split on ranks: tests/ranks/test_t2v.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from ppdit.checkpoint.solver import step_experts
from ppdit.checkpoint.source import ModelSource
from ppdit.checkpoint.tiny import build_tiny_pipeline
from ppdit.model import Experts
from ppdit.parallel.runner import loop_plan
from ppdit.parallel.share import weight_bytes
from ppdit.parallel.step_split.plan import expert_stages
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
    plan = prepare(spec_for(moe, "ulysses=2", 2, num_steps=6)).plan
    for threshold in (0.1, 0.0):  # 0.0 (send every changed row) is a threshold too
        with pytest.raises(ValueError, match=r"and V-Major \(its copies are per model\)"):
            replace(plan, v_major=threshold)
    with pytest.raises(ValueError, match="guidance_scale_2=2.0 is the second expert's scale"):
        SamplingConfig(guidance_scale_2=2.0)


def test_the_memory_prediction_shards_both_experts_under_fsdp():
    """Without a step split a rank holds both experts, and FSDP shards each; only the running
    expert's two blocks are whole at once. (The prediction once sharded one expert and kept
    the other whole: 36 GB a GPU for A14B at Ulysses=4 x FSDP=4 instead of 16.)"""
    from ppdit.analysis.hardware import predict
    from ppdit.analysis.roofline import block_ops, totals
    from ppdit.parallel.layout import Layout
    from ppdit.presets import get_preset

    lay = Layout(ulysses=4, fsdp=True)
    one, two = (predict(m, "H100 SXM", lay).weights_gb for m in ("wan2.1-14b", "wan2.2-a14b"))
    p = get_preset("wan2.1-14b")
    block_gb = totals(block_ops(p, p.latent_shape, ulysses=4, sp=4)).weights * 2 / 1e9
    assert two == pytest.approx(2 * one - 2 * block_gb, rel=1e-6)
    assert predict("wan2.2-a14b", "H100 SXM", Layout(step=2)).weights_gb == pytest.approx(
        predict("wan2.1-14b", "H100 SXM", Layout()).weights_gb)


def test_copies_of_a_pipeline_against_whole_replicas():
    """Lesson 02's baseline in lesson 17's numbers: two whole copies of A14B give 2x one device
    on 8 requests, its expert cut on the same 2 GPUs 1.44x; copies of the cut on 8 GPUs."""
    from ppdit.analysis.bubbles import replicated_speedup, uneven_speedup

    assert replicated_speedup(8, 2, [40]) == 2.0
    assert replicated_speedup(8, 2, [26, 14]) == uneven_speedup(8, [26, 14])
    assert replicated_speedup(32, 8, [26, 14]) == pytest.approx(4 * uneven_speedup(8, [26, 14]))
    assert replicated_speedup(9, 2, [40]) == pytest.approx(9 / 5)  # the odd request out
    with pytest.raises(ValueError, match="GPUs % stages"):
        replicated_speedup(8, 6, [13, 13, 7, 7])
