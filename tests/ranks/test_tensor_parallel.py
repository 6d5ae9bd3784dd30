"""Tensor parallelism on real gloo ranks equals one device within ``TP_TOL``; compiled with zero
graph breaks; each rank holds only its shards; PP x TP (2 x 2) equals one device too.

Two launches carry every multi-rank check (TP=2 on 2 ranks; TP=4 then PP x TP on 4 ranks):
each launch costs seconds and each compile tens of them on a cold Inductor cache.
"""

from __future__ import annotations

import pytest
import torch

from ppdit.analysis.tp_styles import TPCompare, example_inputs, run_tp_compare
from ppdit.model import forward_by_stages, num_params
from ppdit.parallel.layout import Layout
from ppdit.parallel.step_split.plan import make_plan
from ppdit.parallel.step_split.run import StepSplitResult
from ppdit.parallel.tensor.parallelize import TP_TOL, expected_tp_param_count
from ppdit.runtime import launch
from ppdit.runtime.compile_cache import use_project_compile_cache
from ppdit.runtime.rounds import collect
from ppdit.sampler import SamplingConfig, generate
from tests.support import tp_workers
from tests.support.tp_workers import TINY, V, tiny_tp_comm

TP_STYLES = ("funcol", "c10d", "c10d_async", "dtensor")


# compiled: funcol only (notebook 05 compiles it too); DTensor's compile costs a cold Inductor
# compile of its own, and its graph is checked above without one (block trace: one graph, the
# all-reduces inside it)
TP2_VARIANTS = (V("single"), *(V(s) for s in TP_STYLES), V("funcol", True))


@pytest.fixture(scope="module")
def tp2(pools):
    use_project_compile_cache()
    # block 0 traced per style; the forward around the blocks holds no collective, so it is not
    # traced again (the compiled variants compile every block with fullgraph=True, which turns
    # any graph break into an error), and c10d_async's broken graphs are not AOT-traced one by
    # one (the slowest part of tracing by far): its breaks and their reasons are the evidence
    spec = TPCompare(TP2_VARIANTS, trace=True, trace_forward=False,
                     trace_broken_collectives=False, rounds=0)
    return run_tp_compare(spec, 2, timeout_s=600, pool=pools(2))


@pytest.fixture(scope="module")
def reference(tiny):
    with torch.no_grad():
        return forward_by_stages(tiny, *example_inputs("tiny", TINY.latent_shape))


@pytest.mark.parametrize("name", [v.name for v in TP2_VARIANTS])
def test_tp2_equals_one_device(tp2, reference, name):
    for rank_results in tp2:
        out = rank_results[name].output
        if name == "single":
            assert torch.equal(out, reference)
        else:  # the all-reduce adds partial sums in another order than one GEMM: rounding
            torch.testing.assert_close(out, reference, **TP_TOL)
    # every rank ends with the same bits: the all-reduce hands everyone the same sum
    assert torch.equal(tp2[0][name].output, tp2[1][name].output)


@pytest.mark.parametrize("name", [v.name for v in TP2_VARIANTS])
def test_each_rank_holds_only_its_shards(tp2, tiny, name):
    expected = num_params(tiny) if name.startswith("single") else expected_tp_param_count(tiny, 2)
    assert [r[name].local_params for r in tp2] == [expected, expected]
    if not name.startswith("single"):
        assert expected < 0.6 * num_params(tiny)  # the blocks hold most of tiny's parameters


@pytest.mark.parametrize("style", TP_STYLES)
def test_collectives_counted_match_the_formula(tp2, style):
    per_forward = tiny_tp_comm(2).per_forward(TINY.num_layers)
    r = tp2[0][style]
    assert (r.collectives, r.collective_bytes) == (per_forward.all_reduces,
                                                   per_forward.payload_bytes)


@pytest.mark.parametrize("style", ["funcol", "c10d", "dtensor"])
def test_zero_graph_breaks_for_traceable_collectives(tp2, style):
    r = tp2[0][style]
    assert r.block_trace.graph_break_count == 0 and r.block_trace.graph_count == 1
    per_block = tiny_tp_comm(2)  # all 7 all-reduces of a block are inside its one graph
    assert r.block_trace.graph_all_reduces == per_block.all_reduces
    assert r.block_trace.graph_all_reduce_bytes == per_block.payload_bytes


def test_async_c10d_breaks_the_graph_at_every_collective(tp2):
    r = tp2[0]["c10d_async"]
    # a break at each of the block's 7 all-reduces, each for the same reason: async_op=True
    # returns a Work handle, which Dynamo cannot put in a graph (the collectives run eagerly,
    # between the graphs: counted by the eager counter above)
    assert r.block_trace.graph_break_count >= tiny_tp_comm(2).all_reduces
    assert r.block_trace.graph_all_reduces is None  # not counted: the block is not one graph
    assert any("async_op=True" in reason for reason in r.block_trace.break_reasons)


def test_compiled_variants_ran_compiled_code(tp2):
    for name in ("funcol compiled",):
        # Dynamo made at least one graph while the variant compiled: its output (checked
        # against one device above) came from compiled code, not from the eager blocks.
        assert tp2[0][name].graphs_compiled >= 1
    for name in ("funcol", "dtensor"):
        assert tp2[0][name].graphs_compiled == 0


PP_TP_SAMPLING = SamplingConfig(num_steps=4)


@pytest.fixture(scope="module")
def four_ranks(pools):
    use_project_compile_cache()
    spec = TPCompare((V("funcol"),), rounds=0)  # compiled TP is checked at tp=2 above
    plan = make_plan(2, 2, stage=Layout(tp=2), sampling=PP_TP_SAMPLING)
    per_rank = launch(tp_workers.tp4_errors_then_pp_tp, 4, args=(spec, plan),
                      threads_per_rank=1, timeout_s=600, pool=pools(4))
    runs = collect(["plan"], [r["pp_tp"] for r in per_rank], 1)
    return per_rank, StepSplitResult.from_runs(plan, runs["plan"])


@pytest.mark.parametrize("name", ["funcol"])
def test_tp4_equals_one_device(four_ranks, reference, tiny, name):
    per_rank, _ = four_ranks
    for r in per_rank:
        torch.testing.assert_close(r["tp4"][name].output, reference, **TP_TOL)
        assert r["tp4"][name].local_params == expected_tp_param_count(tiny, 4)
        per_forward = tiny_tp_comm(4).per_forward(TINY.num_layers)
        assert r["tp4"][name].collectives == per_forward.all_reduces


def test_wrong_arrangements_raise_with_the_numbers(four_ranks):
    per_rank, _ = four_ranks
    for rank, r in enumerate(per_rank):
        if rank < 3:
            assert "num_heads=4 is not divisible by the TP degree tp=3" in r["errors"]["heads"]
        assert "needs 5 ranks, but the process group has 4" in r["errors"]["mesh"]
        assert "names must differ and sizes be >= 1" in r["errors"]["dims"]
        assert "already tensor-parallel" in r["errors"]["twice"]


def test_pp_x_tp_equals_one_device(four_ranks, tiny, no_orphans):
    _, res = four_ranks
    assert sorted(res.latents) == [0, 1]
    for request in res.plan.requests:
        ref = generate(tiny, request, sampling=PP_TP_SAMPLING)
        torch.testing.assert_close(res.latents[request.request_id], ref, **TP_TOL)
    last = [res.rank_latents[r] for r, s in res.stages.items() if s.pp_rank == 1]
    for rid in (0, 1):  # both TP ranks of the last stage hold the same bits
        assert torch.equal(last[0][rid], last[1][rid])


def test_pp_x_tp_ranks_of_a_stage_run_the_same_steps_in_order(four_ranks, tiny):
    _, res = four_ranks
    trace = res.trace
    for stage, steps in enumerate(res.plan.stages):
        runs = [[(s.meta["request"], s.meta["step"]) for s in trace.select("compute", rank)]
                for rank in (2 * stage, 2 * stage + 1)]
        assert runs[0] == runs[1] == [(r, i) for r in (0, 1) for i in steps]
    assert [s.local_params for s in res.stages.values()] == [expected_tp_param_count(tiny, 2)] * 4
