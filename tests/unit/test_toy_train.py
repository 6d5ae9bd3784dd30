"""Block-causal training computes what the demo's streaming path computes: the teacher-forcing
forward (one pass over [clean | noisy] with a mask) gives each noisy chunk the velocity the
KV-cached chunk forward gives it. Plus the small pieces of the training loop."""

import pytest
import torch

from ppdit.serve.causal import ChunkGenerator, StreamConfig, chunk_forward
from ppdit.toy import models
from ppdit.toy.train import TrainConfig, dit_loss, latent_stats, lr_at, make_batch

# The masked long forward sums attention in another order than the cached one: equal to float
# rounding only (the same reason as ppdit.serve.causal.full_sequence_reference).
TEACHER_FORCING_TOL = 1e-4


def test_teacher_forcing_equals_the_cached_chunk_path():
    torch.manual_seed(0)
    model = models.build_dit(0).eval()
    x0 = torch.randn(1, models.Z_DIM, 6, 8, 8)
    xt = torch.randn_like(x0)
    sig = torch.tensor([0.3, 0.6, 0.9])
    text = torch.randn(1, models.MAX_SEQUENCE_LENGTH, models.TEXT_DIM)
    per_frame = 16
    t = torch.cat([torch.zeros(1, 96), (sig * 1000).repeat_interleave(2 * per_frame)[None]], 1)
    state = models.install_train_attention(model)
    cos, sin = model.rope(torch.empty(x0.shape, device="meta"))
    state.rope = (torch.cat([cos, cos], 1), torch.cat([sin, sin], 1))
    state.mask = models.teacher_forcing_mask(6, per_frame)
    with torch.no_grad():
        tf = model(torch.cat([x0, xt], 2), t, text, return_dict=False)[0][:, :, 6:]
    gen = ChunkGenerator(model, StreamConfig(chunk_frames=2, height=8, width=8,
                                             channels=models.Z_DIM))
    for j in range(3):
        with torch.no_grad():
            v = chunk_forward(model, xt[:, :, 2 * j:2 * j + 2], sig[j:j + 1] * 1000, text, 2 * j)
        torch.testing.assert_close(v, tf[:, :, 2 * j:2 * j + 2], atol=TEACHER_FORCING_TOL,
                                   rtol=0)
        gen.record(x0[:, :, 2 * j:2 * j + 2], 2 * j, text)


def test_a_training_step_runs_both_modes_and_is_seeded():
    model = models.build_dit(0)
    state = models.install_train_attention(model)
    x0 = torch.randn(2, models.Z_DIM, 6, 8, 8)
    text = torch.randn(2, models.MAX_SEQUENCE_LENGTH, models.TEXT_DIM)
    for p_causal in (0.0, 1.0):
        cfg = TrainConfig(p_causal=p_causal)
        a = make_batch(x0, text, cfg, torch.Generator().manual_seed(1))
        b = make_batch(x0, text, cfg, torch.Generator().manual_seed(1))
        assert a.causal == (p_causal == 1.0) and torch.equal(a.latent, b.latent)
        loss = dit_loss(model, state, a)
        loss.backward()
        assert torch.isfinite(loss)


def test_schedule_and_stats():
    assert lr_at(0, 100, 1.0, warmup=10) == pytest.approx(0.1)
    assert lr_at(99, 100, 1.0, warmup=10) < 0.01
    mean, std = latent_stats(torch.randn(64, 8, 6, 8, 8) * 2 + 1)
    assert len(mean) == 8 and all(abs(m - 1) < 0.1 for m in mean)
    assert all(abs(s - 2) < 0.1 for s in std)


def test_teacher_forcing_mask_rules():
    m = models.teacher_forcing_mask(4, 1)  # 2 chunks of 2 frames, 1 token each
    clean, noisy = slice(0, 4), slice(4, 8)
    assert m[clean, clean].tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]]
    assert not m[clean, noisy].any()
    assert m[noisy, clean].tolist() == [[0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]]
    assert m[noisy, noisy].tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]]


def test_train_overrides_cast_to_the_field_type_and_name_the_fields():
    from ppdit.toy.run import _overrides

    cfg = _overrides(TrainConfig(), ["dit_steps=600", "vae_lr=0.001"])
    assert (cfg.dit_steps, cfg.vae_lr) == (600, 0.001)
    with pytest.raises(ValueError, match=r"--set 'dit_stpes=6'.*'dit_steps'"):
        _overrides(TrainConfig(), ["dit_stpes=6"])
