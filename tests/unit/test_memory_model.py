"""The per-rank memory model (``analysis.memory_model``) without ranks: its formulas, the plan
table, and its VAE and attention terms against one process's measured peaks (the layouts'
peaks on real ranks are tests/ranks/test_memory_model.py)."""

from __future__ import annotations

import pytest
import torch

from ppdit import cli
from ppdit.analysis.memory_model import (
    RECEIVE_FRAMES,
    block_peak_units,
    rank_memory_model,
    ring_attention_peak_bytes,
    vae_peak_bytes,
)
from ppdit.analysis.memory_opts import measure_scores, optimisation_ladder, scores_bytes
from ppdit.analysis.roofline import latent_for, step_handoff_bytes
from ppdit.model import torch_dtype
from ppdit.parallel.layout import Layout
from ppdit.parallel.sequence.ring import ring_attention
from ppdit.presets import get_preset
from ppdit.runtime.observe.memory import track_peak_memory
from tests.conftest import MODEL_TOL
from tests.support.ring import loopback_ring


def test_fp32_block_peak_is_the_ffn_and_tp_shrinks_it():
    small = get_preset("small")  # f = ffn / D = 4: the FFN's hidden pair beats attention
    assert block_peak_units(small, Layout(), "fp32") == 3 + 2 * 4
    assert block_peak_units(small, Layout(tp=2), "fp32") == 3 + 4 / 2 + 3  # down proj + AR
    big = get_preset("wan2.1-14b")  # f = 2.7 in bf16: the fp32 residual add is the high point
    assert block_peak_units(big, Layout(), "bf16") == 4 + 2 * 3


def test_terms_follow_the_layout():
    one = rank_memory_model("wan2.1-14b")
    sp = rank_memory_model("wan2.1-14b", Layout(ulysses=4))
    fsdp = rank_memory_model("wan2.1-14b", Layout(ulysses=4, fsdp=True))
    assert sp.activations < one.activations / 2 and sp.weights == one.weights
    assert fsdp.weights < one.weights / 3 and fsdp.gathered > 0
    step = rank_memory_model("wan2.1-14b", Layout(step=2), solver="unipc")
    shape = get_preset("wan2.1-14b").latent_shape
    assert step.handoff == RECEIVE_FRAMES * 4 * step_handoff_bytes(shape)
    assert step.solver == 3 * step_handoff_bytes(shape)
    assert one.total == one.weights + max(one.run_peak, one.vae_peak)
    assert vae_peak_bytes(latent_for("720p")) > 2 * vae_peak_bytes(latent_for("480p")) * 0.9
    with pytest.raises(ValueError, match="solver='dpm'"):
        rank_memory_model("small", solver="dpm")


def test_plan_prints_the_real_size_table(capsys):
    assert cli.main(["plan", "--layout", "ulysses=4,fsdp", "--link", "NVLink 4"]) == 0
    out = capsys.readouterr().out
    for model, res in [("wan2.1-1.3b", "480p"), ("wan2.1-1.3b", "720p"),
                       ("wan2.1-14b", "480p"), ("wan2.1-14b", "720p"), ("wan2.2-ti2v-5b", "720p")]:
        assert any(line.startswith(f"{model:<15}{res}") for line in out.splitlines())
    assert "this layout needs" in out and "your GPUs (H100 SXM) have 80 GB: fits" in out


@pytest.mark.parametrize(("preset", "shape"), [
    ("tiny", (1, 16, 3, 7, 8)), ("tiny", (1, 16, 9, 8, 8)), ("tiny", (1, 16, 2, 12, 12)),
    ("tiny-2.2", (1, 48, 3, 6, 8)), ("tiny-2.2", (1, 48, 7, 8, 8))])
def test_vae_peak_within_15_percent_of_the_tiny_vaes_measured_decode(preset, shape):
    """The VAE term against one process's measured decode (live tensor bytes), short and long
    videos, Wan 2.1's VAE and Wan 2.2's: the final concatenation or the last frame's widest
    conv sets the peak."""
    from ppdit.analysis.memory_model import vae_peak_bytes
    from ppdit.parallel.vae_patch.run import one_process_decode
    from ppdit.vae.presets import build_vae

    torch.set_num_threads(1)
    vae = build_vae(preset, seed=0)
    latent = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    _, measured = one_process_decode(vae, latent)
    predicted = vae_peak_bytes(shape, dict(vae.config))
    assert abs(predicted / measured - 1) < MODEL_TOL, (shape, predicted, measured)


def test_unfused_attention_holds_the_scores_and_softmax_output():
    """The math kernel's extra peak on tiny (S = 320, where the scores dominate) is the two
    (b, H, S, S) matrices within 15%; the fused kernel holds none of them."""
    got = measure_scores("tiny")
    assert got["math"] > got["fused"]
    assert (got["math"] - got["fused"]) == pytest.approx(got["predicted"], rel=0.15)


def test_the_ladder_fused_attention_dominates_and_checkpointing_saves_nothing():
    ladder = optimisation_ladder("wan2.1-14b")
    needs = [r.bytes for r in ladder]
    assert needs[0] > needs[1] > needs[2] == needs[3]  # checkpointing: no backward, no saving
    assert 1 - needs[1] / needs[0] > 0.8  # flash attention: far from modest at 480p
    assert not ladder[-1].fits(24) and ladder[-1].fits(80)
    assert optimisation_ladder("wan2.1-1.3b")[-1].fits(24)  # 1.3B fits once both are on
    assert scores_bytes("wan2.1-14b") == 2 * 2 * 40 * 32760 ** 2 * 2


def test_ring_attention_forms_no_scores_at_real_sizes():
    """Wan 14B, ring 2, 480p x 81 frames, bf16: one call's peak is O(S), a few GB; the fp32
    S x S scores it used to form off the CPU were over 100 GB (no GPU holds that)."""
    fused = ring_attention_peak_bytes("wan2.1-14b", 2, "480p", dtype="bf16")
    scores = ring_attention_peak_bytes("wan2.1-14b", 2, "480p", dtype="bf16", scores=True)
    assert fused < 10e9 < 100e9 < scores
    assert scores > 3 * 40 * 16_380 ** 2 * 4  # 3 fp32 (H, s, s) at s = 32,760 / 2 tokens
    assert ring_attention_peak_bytes("wan2.1-1.3b", 4) < ring_attention_peak_bytes(
        "wan2.1-1.3b", 2)
    with pytest.raises(ValueError, match="ring=1"):
        ring_attention_peak_bytes("wan2.1-14b", 1)


# The ring's count names every tensor alive at the merge; the CPU's live-tensor count sees the
# same tensors (the flash kernel's tiles are workspace it never returns): equal today, 1% for
# another torch's rounding of a buffer.
RING_PEAK_TOL = 0.01


@pytest.mark.parametrize("degree, dtype", [(2, "fp32"), (3, "bf16"), (3, "fp32")])
def test_ring_attention_peak_equals_the_measured_loop(degree, dtype):
    """The real ``ring_attention`` loop in one process (hops looped back), its live-tensor peak
    against the model: the tiny preset at 480p x 5 frames (3,120 tokens)."""
    p = get_preset("tiny")
    s = p.num_tokens(latent_for("480p", 5)) // degree
    g = torch.Generator().manual_seed(0)
    with track_peak_memory() as mem:
        q, k, v = (torch.randn(1, s, p.num_heads, p.head_dim, generator=g,
                               dtype=torch_dtype(dtype)) for _ in range(3))
        ring_attention(q, k, v, loopback_ring(degree, s))
    predicted = ring_attention_peak_bytes(p, degree, "480p", frames=5, dtype=dtype)
    assert predicted == pytest.approx(mem.peak_bytes, rel=RING_PEAK_TOL)
