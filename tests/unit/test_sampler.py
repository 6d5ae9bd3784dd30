"""Flow-matching sampler: the schedule, determinism, and that a StepState is a full handoff."""

from __future__ import annotations

import itertools

import pytest
import torch

from ppdit.sampler import (
    Denoiser,
    Request,
    SamplingConfig,
    StepState,
    generate,
    generate_batched,
)
from tests.conftest import BATCHED_TOL


def test_sigmas_run_from_one_to_zero_with_the_shift():
    cfg = SamplingConfig(num_steps=10, shift=3.0)
    s = cfg.sigmas()
    assert s.shape == (11,) and s[0] == 1.0 and s[-1] == 0.0
    assert bool((s[1:] < s[:-1]).all())
    base = torch.linspace(1, 0, 11, dtype=torch.float64)
    assert torch.allclose(s.double(), 3 * base / (1 + 2 * base), atol=1e-7)
    assert torch.equal(cfg.timesteps(), s[:-1] * 1000)


def test_generate_is_deterministic_and_seed_dependent(tiny):
    cfg = SamplingConfig(num_steps=4)
    a = generate(tiny, Request(0, 7), sampling=cfg)
    assert torch.equal(a, generate(tiny, Request(3, 7), sampling=cfg))  # id does not matter
    assert not torch.equal(a, generate(tiny, Request(0, 8), sampling=cfg))


@pytest.mark.parametrize("split", [[0, 7], [0, 3, 7], [0, 1, 2, 3, 4, 5, 6, 7]])
def test_state_is_a_complete_handoff(tiny, split):
    """A fresh Denoiser (a "new rank") continuing from a StepState gives the same bits."""
    cfg, req = SamplingConfig(num_steps=7, guidance_scale=4.0, guidance_steps=3), Request(0, 1)
    ref = generate(tiny, req, sampling=cfg)
    state = Denoiser(tiny, "tiny", cfg).initial_state(req, (1, 16, 5, 16, 16))
    for start, stop in itertools.pairwise(split):
        den = Denoiser(tiny, "tiny", cfg)
        [state] = den.run([StepState(state.request_id, state.step_index, state.latent.clone())],
                          [req], range(start, stop))
    assert state.step_index == 7
    assert torch.equal(state.latent, ref)


def test_out_buffer_gives_the_same_bits(tiny):
    cfg, req = SamplingConfig(num_steps=3), Request(0, 2)
    den = Denoiser(tiny, "tiny", cfg)
    s0 = den.initial_state(req, (1, 16, 5, 16, 16))
    buf = torch.empty_like(s0.latent)
    [a] = den.run([s0], [req], range(3))
    [b] = den.run([s0], [req], range(3), out=buf)
    assert b.latent.data_ptr() == buf.data_ptr()
    assert torch.equal(a.latent, b.latent)


def test_batched_matches_one_at_a_time_to_rounding(tiny):
    cfg = SamplingConfig(num_steps=28)
    reqs = [Request(i, 10 + i) for i in range(3)]
    batched = generate_batched(tiny, reqs, sampling=cfg)
    for r, b in zip(reqs, batched, strict=True):
        torch.testing.assert_close(b, generate(tiny, r, sampling=cfg), **BATCHED_TOL)


def test_guidance_changes_the_result_and_costs(tiny):
    plain = SamplingConfig(num_steps=4)
    guided = SamplingConfig(num_steps=4, guidance_scale=5.0, guidance_steps=2)
    assert guided.step_costs() == [2.0, 2.0, 1.0, 1.0]
    assert plain.step_costs() == [1.0] * 4
    r = Request(0, 3)
    assert not torch.equal(generate(tiny, r, sampling=plain), generate(tiny, r, sampling=guided))


def test_mixed_guidance_in_one_batch_matches_separate(tiny):
    """A stream batch mixes guided and unguided samples; each must get its own treatment."""
    cfg = SamplingConfig(num_steps=4, guidance_scale=5.0, guidance_steps=2)
    den = Denoiser(tiny, "tiny", cfg)
    reqs = [Request(0, 1), Request(1, 2)]
    states = [den.initial_state(r, (1, 16, 5, 16, 16)) for r in reqs]
    states[1] = den.step(den.step(states[1], reqs[1]), reqs[1])  # now at step 2 (unguided)
    mixed = den.step_batch(states, reqs)
    for s, r, m in zip(states, reqs, mixed, strict=True):
        torch.testing.assert_close(m.latent, den.step(s, r).latent, **BATCHED_TOL)


@pytest.mark.parametrize("kwargs,match", [
    ({"num_steps": 0}, "num_steps=0 must be >= 1"),
    ({"shift": 0.0}, "shift=0.0 must be > 0"),
    ({"num_steps": 4, "guidance_steps": 5}, "guidance_steps=5 must be in 0..num_steps"),
])
def test_bad_sampling_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingConfig(**kwargs)


def test_step_past_the_end_is_an_error(tiny):
    den = Denoiser(tiny, "tiny", SamplingConfig(num_steps=2))
    done = StepState(0, 2, torch.zeros(1, 16, 5, 16, 16))
    with pytest.raises(ValueError, match="step_index=2 is outside 0..1"):
        den.step(done, Request(0, 0))
