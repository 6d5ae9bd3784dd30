"""Step-split PP on real gloo ranks equals one device: bitwise where the arithmetic is the same.

Plans are packed into few launches with ``run_side_by_side`` (each launch costs seconds).
"""

from __future__ import annotations

import json

import pytest
import torch

from ppdit.analysis.trace_stats import busy_fractions, handoff_latencies, summary
from ppdit.checkpoint.solver import plan_denoiser
from ppdit.checkpoint.source import ModelSource
from ppdit.model import build_model
from ppdit.parallel.step_split.plan import StepSplitPlan, make_plan
from ppdit.parallel.step_split.run import (
    run_step_split,
    run_step_splits,
    stream_batch_reference,
)
from ppdit.sampler import Request, SamplingConfig, generate
from tests.conftest import BATCHED_TOL

SEVEN = SamplingConfig(num_steps=7)


@pytest.fixture(scope="module")
def world_sizes_run(pools):
    """World sizes 1-4, even and uneven splits, two requests each, one launch of 4 ranks."""
    plans = {
        "p1_7": make_plan(1, 2, sampling=SEVEN),
        "p2_7": make_plan(2, 2, sampling=SEVEN),      # 4 + 3
        "p3_7": make_plan(3, 2, sampling=SEVEN),      # 3 + 2 + 2
        "p4_7": make_plan(4, 2, sampling=SEVEN),      # 2 + 2 + 2 + 1
        "p4_8": make_plan(4, 2, sampling=SamplingConfig(num_steps=8)),  # divides
        "p2_no_fill": make_plan(2, 2, sampling=SEVEN, max_in_flight=1),
    }
    return run_step_splits(plans, rounds=1, timeout_s=300, pool=pools(4))


@pytest.mark.parametrize("name", ["p1_7", "p2_7", "p3_7", "p4_7", "p4_8", "p2_no_fill"])
def test_step_split_equals_one_device_bitwise(world_sizes_run, tiny, name):
    res = world_sizes_run[name]
    assert sorted(res.latents) == [0, 1]
    for rid, latent in res.latents.items():
        ref = generate(tiny, Request(rid, rid), sampling=res.plan.sampling)
        assert torch.equal(latent, ref), f"{name}: request {rid} differs from one device"


def test_every_step_runs_exactly_once_on_its_stage(world_sizes_run):
    res = world_sizes_run["p3_7"]
    seen = sorted((s.meta["request"], s.meta["step"], s.rank) for s in res.trace.select("compute"))
    expected = sorted((r, i, stage) for r in (0, 1)
                      for stage, steps in enumerate(res.plan.stages) for i in steps)
    assert seen == expected


def test_trace_shows_handoffs_and_exports(world_sizes_run, tmp_path):
    res = world_sizes_run["p4_7"]
    lat = handoff_latencies(res.trace)
    assert len(lat) == 2 * 3  # two requests, three handoffs each
    assert all(0 <= x < 1.0 for x in lat)
    busy = busy_fractions(res.trace)
    assert set(busy) == {0, 1, 2, 3} and all(0 < b <= 1 for b in busy.values())
    data = json.loads(res.trace.save_chrome(tmp_path / "t.json").read_text())
    kinds = {e.get("cat") for e in data["traceEvents"] if e["ph"] == "X"}
    assert {"compute", "send", "recv"} <= kinds
    assert summary(res.trace, 2)["handoffs"] == 6


@pytest.fixture(scope="module")
def batching_run(pools):
    """Filling with many requests, groups, stream batch, replicas, guidance: one launch."""
    guided = SamplingConfig(num_steps=6, guidance_scale=4.0, guidance_steps=3)
    plans = {
        "filled": make_plan(2, 5, sampling=SEVEN),
        "groups": make_plan(2, 4, sampling=SEVEN, micro_batch=2, max_in_flight=1),
        "stream": make_plan(2, 5, sampling=SEVEN, mode="stream_batch"),
        "stream_dp": make_plan(2, 4, sampling=SEVEN, mode="stream_batch", replicas=2),
        "dp": make_plan(1, 4, sampling=SEVEN, replicas=2),
        "guided": make_plan(2, 3, sampling=guided, weights=guided.step_costs()),
    }
    return run_step_splits(plans, rounds=1, timeout_s=300, pool=pools(4))


@pytest.mark.parametrize("name", ["filled", "dp", "guided"])
def test_filled_requests_equal_per_request_single_device(batching_run, tiny, name):
    res = batching_run[name]
    assert len(res.latents) == len(res.plan.requests)
    for r in res.plan.requests:
        assert torch.equal(res.latents[r.request_id],
                           generate(tiny, r, sampling=res.plan.sampling))


def test_groups_equal_the_same_groups_on_one_device(batching_run, tiny):
    res = batching_run["groups"]
    ref = grouped_reference(tiny, res.plan)
    for rid, latent in res.latents.items():
        assert torch.equal(latent, ref[rid])
        torch.testing.assert_close(latent, generate(tiny, Request(rid, rid), sampling=SEVEN),
                                   **BATCHED_TOL)


@pytest.mark.parametrize("name", ["stream", "stream_dp"])
def test_stream_batch_equals_its_schedule_on_one_device(batching_run, tiny, name):
    res = batching_run[name]
    ref = stream_batch_reference(tiny, res.plan)
    assert sorted(res.latents) == sorted(ref)
    for rid, latent in res.latents.items():
        assert torch.equal(latent, ref[rid])  # same batches, same bits
        torch.testing.assert_close(latent, generate(tiny, Request(rid, rid), sampling=SEVEN),
                                   **BATCHED_TOL)


def test_stream_batch_holds_at_most_one_request_per_step(batching_run):
    res = batching_run["stream"]
    for rank, steps in enumerate(res.plan.stages):
        sizes = [s.meta["batch"] for s in res.trace.select("compute", rank)]
        assert max(sizes) == len(steps)


def test_weighted_split_balances_guided_steps(batching_run):
    plan = batching_run["guided"].plan
    costs = plan.sampling.step_costs()
    per_stage = [sum(costs[i] for i in r) for r in plan.stages]
    assert max(per_stage) - min(per_stage) <= 1  # 2+2+2+1+1+1 = 9 -> 5 and 4


def test_progress_events_report_each_request(pools):
    seen = []
    plan = make_plan(2, 3, sampling=SamplingConfig(num_steps=2))
    run_step_split(plan, on_event=lambda rank, e: seen.append((rank, e)), timeout_s=120,
                   pool=pools(2))
    assert sorted(seen) == [(1, ("done", i)) for i in range(3)]


# bf16: the same arithmetic on every stage as on one device, so equal bit for bit; and not the
# fp32 result (within bf16's rounding of it), which shows the weights really were bf16.
BF16_VS_FP32 = {"rtol": 5e-2, "atol": 5e-2}  # 4 steps of bf16 activations (unit roundoff 2^-8)


def test_bf16_step_split_equals_one_device_bf16(pools, tiny):
    sampling = SamplingConfig(num_steps=4)
    plan = make_plan(2, 2, sampling=sampling, source=ModelSource(dtype="bf16"))
    res = run_step_split(plan, timeout_s=120, pool=pools(2))
    bf16 = build_model("tiny", seed=0, dtype="bf16")
    for r in plan.requests:
        out = res.latents[r.request_id]
        assert out.dtype == torch.float32  # latents stay fp32 between steps
        assert torch.equal(out, generate(bf16, r, sampling=sampling))
        fp32 = generate(tiny, r, sampling=sampling)
        assert not torch.equal(out, fp32)
        torch.testing.assert_close(out, fp32, **BF16_VS_FP32)


def test_a_stage_slower_than_the_floor_completes(tiny):
    """The first handoff comes after 2 slow steps (> 0.6 s), past the 0.5 s floor of every wait:
    the receive's bound comes from the work upstream (p2p.work_bound), as 14B at 480p needs
    (minutes before its first handoff against the old fixed 60 s)."""
    from ppdit.parallel.step_split.run import StepSplitResult
    from ppdit.runtime.rounds import run_side_by_side
    from tests.support.workers import SlowStepRunner

    plan = make_plan(2, 1, sampling=SamplingConfig(num_steps=4), timeout_s=0.5)
    runs = run_side_by_side({"slow": plan}, runner=SlowStepRunner, world_size=2,
                            timeout_s=120, echo=False)
    res = StepSplitResult.from_runs(plan, runs["slow"])
    waited = [s.duration_s for s in res.traces[0].spans if s.kind == "recv" and s.rank == 1]
    assert waited and waited[0] > plan.timeout_s  # the old fixed bound would have fired
    assert torch.equal(res.latents[0], generate(tiny, Request(0, 0), sampling=plan.sampling))


def test_each_round_reports_every_ranks_peak_memory(pools):
    """Asked for on the CPU (free on a GPU): each rank's peak tensor bytes in the trace."""
    from ppdit.runtime.observe.trace import peak_memory

    plans = {"p2": make_plan(2, 1, sampling=SamplingConfig(num_steps=4))}
    res = run_step_splits(plans, rounds=1, memory=True, pool=pools(2))["p2"]
    peaks = peak_memory(res.trace)
    assert sorted(peaks) == [0, 1] and all(v > 0 for v in peaks.values())
    plain = run_step_splits(plans, rounds=1, pool=pools(2))["p2"]
    assert peak_memory(plain.trace) == {}  # not asked for on the CPU: not measured


def grouped_reference(model: torch.nn.Module, plan: StepSplitPlan) -> dict[int, torch.Tensor]:
    """Each ``micro_batch`` group batched through all steps on one device (== "filled" bitwise)."""
    den = plan_denoiser(model, plan)
    out: dict[int, torch.Tensor] = {}
    for group in [g for rep in range(plan.replicas) for g in plan.groups(rep)]:
        states = [den.initial_state(r, plan.shape) for r in group]
        for s in den.run(states, group, range(plan.sampling.num_steps)):
            out[s.request_id] = s.latent
    return out
