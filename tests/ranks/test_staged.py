"""The shared-GPU transport, checked on the CPU: with staging forced on, every message and
collective goes through host copies exactly as it does when ranks share a GPU over gloo, and
every layout still equals one device (bitwise where it does unstaged; TP within ``TP_TOL``).
"""

from __future__ import annotations

import pytest
import torch

from ppdit.analysis.tp_styles import TPCompare, TPVariant, run_tp_compare
from ppdit.parallel.decode_overlap.plan import OverlapPlan
from ppdit.parallel.decode_overlap.run import overlap_reference, run_decode_overlap
from ppdit.parallel.layer_split.run import layer_split_reference, run_layer_split
from ppdit.parallel.layer_split.schedule import LayerSplitPlan
from ppdit.parallel.layout import Layout
from ppdit.parallel.runner import LayoutPlan, run_plan
from ppdit.parallel.sequence.ulysses import SP_TOL
from ppdit.parallel.step_split.plan import make_plan
from ppdit.parallel.step_split.run import run_step_split
from ppdit.parallel.tensor.parallelize import TP_TOL
from ppdit.runtime import RankError
from ppdit.sampler import Request, SamplingConfig, generate
from ppdit.serve.config import BringupConfig
from ppdit.serve.system import reference_stream, run_bringup
from ppdit.vae.presets import build_vae

FOUR = SamplingConfig(num_steps=4)


@pytest.fixture(scope="module")
def staged(pools):
    return pools(2, stage=True)


def test_a_staged_pool_reports_its_placement(staged):
    assert staged.placement.staged and staged.placement.kind == "cpu"


def test_step_split_staged_equals_one_device_bitwise(staged, tiny):
    plan = make_plan(2, 3, sampling=FOUR, max_in_flight=2)
    res = run_step_split(plan, pool=staged)
    for r in plan.requests:
        assert torch.equal(res.latents[r.request_id], generate(tiny, r, sampling=FOUR))


def test_layer_split_staged_equals_its_reference_bitwise(staged, tiny):
    plan = LayerSplitPlan(tuple(Request(i, i) for i in range(2)), 2, 2, sampling=FOUR)
    res = run_layer_split(plan, pool=staged)
    ref = layer_split_reference(tiny, plan)
    assert all(torch.equal(res.latents[k], ref[k]) for k in ref)


def test_sequence_parallel_staged_equals_one_device(staged, tiny):
    res = run_plan(LayoutPlan(Layout(ulysses=2), sampling=SamplingConfig(num_steps=2)),
                   pool=staged)
    ref = generate(tiny, Request(0, 0), sampling=SamplingConfig(num_steps=2))
    for latents in res.rank_latents:
        torch.testing.assert_close(latents[0], ref, **SP_TOL)


def test_tensor_parallel_staged_equals_one_device(staged):
    spec = TPCompare((TPVariant("single"), TPVariant("funcol"), TPVariant("c10d")), rounds=0)
    per_rank = run_tp_compare(spec, 2, pool=staged)
    for name in ("funcol", "c10d"):
        torch.testing.assert_close(per_rank[0][name].output, per_rank[0]["single"].output,
                                   **TP_TOL)


def test_decode_overlap_staged_equals_one_process(staged, tiny):
    plan = OverlapPlan(num_chunks=2, sampling=SamplingConfig(num_steps=2))
    res = run_decode_overlap({"p": plan}, pool=staged)["p"]
    latents, video = overlap_reference(tiny, build_vae("tiny", seed=0), plan)
    assert torch.equal(res.latents, latents) and torch.equal(res.video, video)


def test_bringup_staged_equals_one_device_bitwise(staged):
    cfg = BringupConfig(phase="overlap", chunks=3, num_steps=2, timeout_s=20.0)
    res = run_bringup(cfg, pool=staged)
    ref = reference_stream(cfg)
    assert len(res.controller.latents) == 3
    assert all(torch.equal(x, ref[k]) for k, x in res.controller.latents.items())


def test_what_cannot_be_staged_says_so(staged):
    for variant in (TPVariant("dtensor"), TPVariant("funcol", compiled=True)):
        with pytest.raises(RankError, match="staged|gloo cannot move CUDA tensors"):
            run_tp_compare(TPCompare((variant,), rounds=0), 2, pool=staged)
