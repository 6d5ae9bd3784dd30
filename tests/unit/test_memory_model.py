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
    vae_peak_bytes,
)
from ppdit.analysis.memory_opts import measure_scores, optimisation_ladder, scores_bytes
from ppdit.analysis.roofline import latent_for, step_handoff_bytes
from ppdit.parallel.layout import Layout
from ppdit.presets import get_preset
from tests.conftest import MODEL_TOL


def test_fp32_block_peak_is_the_ffn_and_tp_shrinks_it():
    small = get_preset("small")  # f = ffn / D = 4: the FFN's hidden pair beats attention
    assert block_peak_units(small, Layout(), "fp32") == 3 + 2 * 4
    assert block_peak_units(small, Layout(tp=2), "fp32") == 3 + 4 / 2 + 3  # down proj + AR
    big = get_preset("wan2.1-14b")  # f = 2.7 in bf16: the fp32 residual add is the high point
    assert block_peak_units(big, Layout(), "bf16") == 4 + 2 * 3


def test_terms_follow_the_layout():
    one = rank_memory_model("wan2.1-14b")
    sp = rank_memory_model("wan2.1-14b", Layout(ulysses=4))
    fsdp = rank_memory_model("wan2.1-14b", Layout(ulysses=4, fsdp=4))
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
    assert cli.main(["plan", "--layout", "ulysses=4,fsdp=4", "--link", "NVLink 4"]) == 0
    out = capsys.readouterr().out
    for model, res in [("wan2.1-1.3b", "480p"), ("wan2.1-1.3b", "720p"),
                       ("wan2.1-14b", "480p"), ("wan2.1-14b", "720p")]:
        assert any(line.startswith(f"{model:<12}{res}") for line in out.splitlines())
    assert "this layout needs" in out and "your GPUs (H100 SXM) have 80 GB: fits" in out


@pytest.mark.parametrize("shape", [(1, 16, 3, 7, 8), (1, 16, 9, 8, 8), (1, 16, 2, 12, 12)])
def test_vae_peak_within_15_percent_of_the_tiny_vaes_measured_decode(shape):
    """The VAE term against one process's measured decode (live tensor bytes), short and long
    videos: the final concatenation or the last frame's widest conv sets the peak."""
    from ppdit.analysis.memory_model import vae_peak_bytes
    from ppdit.parallel.vae_patch.run import one_process_decode
    from ppdit.vae.presets import build_vae

    torch.set_num_threads(1)
    vae = build_vae("tiny", seed=0)
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
