"""Layer-split PP on real gloo ranks equals one device; each rank holds only its blocks."""

from __future__ import annotations

import pytest
import torch

from ppdit.analysis.bubbles import measured_bubble
from ppdit.checkpoint.source import ModelSource
from ppdit.model import build_model, num_params
from ppdit.parallel.layer_split.comms import message_spec
from ppdit.parallel.layer_split.ranks import expected_param_count
from ppdit.parallel.layer_split.run import (
    layer_split_reference,
    run_layer_split,
    run_layer_splits,
)
from ppdit.parallel.layer_split.schedule import LayerSplitPlan, Message
from ppdit.sampler import generate
from tests.conftest import BATCHED_TOL
from tests.support.layer_split_plans import PLANS, THREE, reqs


@pytest.fixture(scope="module")
def runs(pools):
    return run_layer_splits(PLANS, rounds=1, timeout_s=600, pool=pools(4))


@pytest.mark.parametrize("name", list(PLANS))
def test_layer_split_equals_the_same_micro_batches_on_one_device(runs, tiny, name):
    res = runs[name]
    ref = layer_split_reference(tiny, res.plan)
    assert sorted(res.latents) == sorted(ref)
    for rid, latent in res.latents.items():
        assert torch.equal(latent, ref[rid]), f"{name}: request {rid}"


@pytest.mark.parametrize("name", list(PLANS))
def test_layer_split_matches_per_request_generation(runs, tiny, name):
    """One request per micro-batch without guidance runs the same arithmetic as ``generate``:
    bitwise. Otherwise micro-batches batch several samples (other GEMM shapes): rounding."""
    res = runs[name]
    one_each = (not res.plan.sampling.uses_cfg
                and all(len(res.plan.micro_samples(m)) == 1
                        for m in range(res.plan.micro_batches)))
    for r in res.plan.requests:
        single = generate(tiny, r, sampling=res.plan.sampling)
        if one_each:
            assert torch.equal(res.latents[r.request_id], single)
        else:
            torch.testing.assert_close(res.latents[r.request_id], single, **BATCHED_TOL)


@pytest.mark.parametrize("name", ["p2_m1", "p3_m3_uneven", "p4_m4", "p2_v2_m4"])
def test_each_rank_holds_only_its_blocks(runs, name):
    res = runs[name]
    plan = res.plan
    assert res.params_per_rank == [expected_param_count(plan, r) for r in range(plan.num_stages)]
    full = build_model(plan.preset)
    blocks = num_params(full.blocks)
    shared = num_params(full) - blocks  # embedders, prologue, epilogue
    assert sum(res.params_per_rank) < num_params(full) * plan.num_stages
    assert sum(res.params_per_rank) - blocks <= shared * plan.num_stages


def test_wrap_trace_has_compute_for_every_task(runs):
    res = runs["p2_v2_m4"]
    seen = sorted((s.rank, s.meta["step"], s.meta["chunk"], s.meta["micro"])
                  for s in res.trace.select("compute"))
    expected = sorted((r, t.step, t.chunk, t.micro) for r in range(2)
                      for t in res.plan.tasks(r))
    assert seen == expected
    assert 0.0 <= measured_bubble(res.trace, 2) < 1.0


def test_bf16_layer_split_equals_its_reference_in_bf16(pools):
    plan = LayerSplitPlan(reqs(2), 2, 2, sampling=THREE, source=ModelSource(dtype="bf16"))
    res = run_layer_split(plan, timeout_s=300, pool=pools(2))
    ref = layer_split_reference(build_model("tiny", seed=0, dtype="bf16"), plan)
    assert all(torch.equal(res.latents[k], ref[k]) for k in ref)
    assert message_spec(plan, Message("hidden", 0, 0, 1), 64).dtype == torch.bfloat16
