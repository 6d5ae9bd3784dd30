"""The step-graph runner: eager on CPU with the static-buffer discipline a CUDA graph needs, equal
to ``Denoiser``; the overhead tools. Capture and replay need a GPU (marked ``gpu``); the decode
overlap on the graph runner is in tests/gpu, the compile cache in tests/system/test_graphs.py."""

from __future__ import annotations

import pytest
import torch

from ppdit.analysis.overhead import capture_hazards, count_ops, per_op_overhead_us
from ppdit.cuda_graph import StepGraph
from ppdit.model import build_model
from ppdit.runtime.device import Placement
from ppdit.sampler import Denoiser, Request, SamplingConfig, generate, initial_noise
from tests.conftest import GRAPH_TOL
from tests.support.gpu import needs_cuda

SHAPE = (1, 16, 5, 16, 16)
SAMPLING = SamplingConfig(num_steps=4)
REQUEST = Request(3, 11)


@pytest.fixture
def runner(tiny):
    with StepGraph(tiny, latent_shape=SHAPE, sampling=SAMPLING) as g:
        g.load_request(REQUEST)
        yield g


def test_cpu_runner_is_eager_and_equals_generate_bitwise(runner, tiny):
    assert not runner.captured
    out = runner.run(initial_noise(REQUEST, SHAPE), range(SAMPLING.num_steps))
    assert torch.equal(out, generate(tiny, REQUEST, sampling=SAMPLING, latent_shape=SHAPE))


def test_every_step_equals_the_denoiser_step(runner, tiny):
    den = Denoiser(tiny, "tiny", SAMPLING)
    state = den.initial_state(REQUEST, SHAPE)
    for i in range(SAMPLING.num_steps):
        expected = den.step(state, REQUEST)
        assert torch.equal(runner.step(state.latent, i), expected.latent), f"step {i}"
        state = expected


def test_inputs_are_copied_into_static_buffers(runner):
    buffers = [t.data_ptr() for t in (runner.static_latent, runner.static_step,
                                      runner.static_text, runner.static_out)]
    x = initial_noise(REQUEST, SHAPE)
    out1 = runner.step(x, 2)
    assert out1.data_ptr() == runner.static_out.data_ptr()  # the output *is* the static buffer
    assert torch.equal(runner.static_latent, x)  # copied in, not aliased
    assert runner.static_latent.data_ptr() != x.data_ptr()
    assert runner.static_step.tolist() == [2]
    kept = out1.clone()
    x.add_(1.0)  # the caller's tensor changes after the call: the step's inputs do not
    assert not torch.equal(runner.static_latent, x)
    out2 = runner.step(x, 3)
    assert out2.data_ptr() == out1.data_ptr() and not torch.equal(out2, kept)  # overwritten
    assert buffers == [t.data_ptr() for t in (runner.static_latent, runner.static_step,
                                              runner.static_text, runner.static_out)]


def test_text_comes_from_the_request_like_the_denoiser(runner, tiny):
    den = Denoiser(tiny, "tiny", SAMPLING)
    assert torch.equal(runner.static_text, den.conditioning(REQUEST).text)


def test_shape_change_is_a_clear_error(runner):
    with pytest.raises(ValueError, match=r"latent shape \(1, 16, 3, 16, 16\) differs .* "
                                         r"\(1, 16, 5, 16, 16\).*new capture"):
        runner.step(torch.zeros(1, 16, 3, 16, 16), 0)
    with pytest.raises(ValueError, match=r"text shape \(2, 8, 32\)"):
        runner.set_text(torch.zeros(2, 8, 32))
    with pytest.raises(ValueError, match="float64"):
        runner.step(torch.zeros(SHAPE, dtype=torch.float64), 0)
    with pytest.raises(ValueError, match=r"step_index=4 is outside 0..3"):
        runner.step(torch.zeros(SHAPE), 4)


def test_guidance_and_closed_runners_are_refused(tiny):
    with pytest.raises(ValueError, match="classifier-free guidance .* dynamic shape"):
        StepGraph(tiny, latent_shape=SHAPE, sampling=SamplingConfig(guidance_scale=5.0))
    g = StepGraph(tiny, latent_shape=SHAPE, sampling=SAMPLING)
    g.close()
    with pytest.raises(RuntimeError, match=r"step\(\) after close\(\)"):
        g.step(torch.zeros(SHAPE), 0)


def test_dummy_model_runs_through_the_same_runner():
    model = build_model("dummy")
    shape = (1, 8, 8, 32, 32)
    with StepGraph(model, latent_shape=shape, sampling=SAMPLING, preset="dummy") as g:
        g.load_request(REQUEST)
        out = g.run(initial_noise(REQUEST, shape), range(SAMPLING.num_steps))
        assert torch.equal(out, generate(model, REQUEST, preset="dummy", sampling=SAMPLING))


# -- the overhead tools --------------------------------------------------------------------------


def test_hazard_scan_finds_what_breaks_capture(runner, tiny):
    x = initial_noise(REQUEST, SHAPE)
    assert capture_hazards(lambda: runner.step(x, 0)) == {}  # the captured body is clean
    guided = Denoiser(tiny, "tiny", SamplingConfig(num_steps=4, guidance_scale=5.0))
    state = guided.initial_state(REQUEST, SHAPE)
    kinds = {kind for kind, _ in capture_hazards(lambda: guided.step(state, REQUEST))}
    assert kinds == {"host sync", "host data", "dynamic shape"}


def test_op_counts_and_overhead_are_measured(runner):
    x = initial_noise(REQUEST, SHAPE)
    ops = count_ops(lambda: runner.step(x, 0))
    assert 100 < ops.top_level <= ops.total  # hundreds of operators per tiny step
    assert sum(ops.by_name.values()) == ops.top_level
    assert "aten::linear" in ops.by_name
    costs = per_op_overhead_us(calls=200, repeats=1)
    assert all(0 < us < 1e4 for us in costs.values())


# -- GPU only: real capture and replay -----------------------------------------------------------


@pytest.mark.gpu
@needs_cuda
def test_gpu_replay_equals_eager_and_follows_new_inputs():
    placement = Placement(torch.device("cuda", 0), "nccl")
    model = build_model("tiny", seed=0, device=placement.device)
    den = Denoiser(model, "tiny", SAMPLING)
    with StepGraph(model, latent_shape=SHAPE, sampling=SAMPLING, placement=placement) as g:
        assert g.captured
        g.load_request(REQUEST)
        state = den.initial_state(REQUEST, SHAPE)
        for i in range(SAMPLING.num_steps):  # replays read the new static inputs each time
            expected = den.step(state, REQUEST)
            torch.testing.assert_close(g.step(state.latent, i), expected.latent, **GRAPH_TOL)
            state = expected
        with pytest.raises(ValueError, match="needs a new capture"):
            g.step(torch.zeros(1, 16, 3, 16, 16, device=placement.device), 0)


@pytest.mark.gpu
@needs_cuda
def test_gpu_eager_vs_graph_timing_runs():
    from ppdit.analysis.overhead import eager_vs_graph_ms

    placement = Placement(torch.device("cuda", 0), "nccl")
    model = build_model("tiny", seed=0, device=placement.device)
    out = eager_vs_graph_ms(model, preset="tiny", latent_shape=SHAPE, placement=placement,
                            steps=5)
    assert out["eager_ms"] > 0 and out["graph_ms"] > 0
