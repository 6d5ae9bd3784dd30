"""``ppdit plan``: a composed layout's weights per GPU and step bound, before anything runs."""

from __future__ import annotations

import pytest

from ppdit import cli
from ppdit.analysis.plan import plan_rows
from ppdit.parallel.layout import parse_layout


def test_fsdp_beside_ulysses_fits_14b_where_one_gpu_does_not():
    """Wan 2.1-14B's 28.6 GB of bf16 weights do not fit a 24 GB RTX 4090; sharded over 4 GPUs
    beside Ulysses each holds the root, a quarter of the blocks and two gathered blocks."""
    one, *layout = plan_rows("wan2.1-14b", "RTX 4090", "ulysses=4,fsdp")
    assert not one.fits and all(r.fits for r in layout)
    assert all(one.weights_gb / 4 < r.weights_gb < one.weights_gb / 3 for r in layout)
    plain = plan_rows("wan2.1-14b", "RTX 4090", "ulysses=4")[1]
    assert all(r.comm_s > plain.comm_s for r in layout)  # the gathers cross the link


def test_the_roofline_names_a_layout_as_its_tables_do():
    assert parse_layout("pp_tp", 4).name == "TP=2 x step-split P=2"
    assert parse_layout("layer", 4).name == "layer-split P=4"
    assert parse_layout("cfg=2,ulysses=2,ring=2,fsdp").name == \
        "CFG=2 x Ulysses=2 x ring=2 x FSDP"
    rows = plan_rows("wan2.1-14b", "H100 SXM", "cfg=2,tp=2", link="NVLink 4")
    assert rows[1].layout == "CFG=2 x TP=2" and rows[1].gpus == 4


def test_cli_plan_prints_the_verdict_and_refuses_bad_layouts(capsys):
    assert cli.main(["plan", "--layout", "cfg=2,ulysses=4,fsdp", "--link", "NVLink 4"]) == 0
    out = capsys.readouterr().out
    assert "needs 5.4 GB of weights per GPU (fits in the H100 SXM's 80 GB)" in out
    assert cli.main(["plan", "--model", "wan2.1-1.3b", "--layout", "tp=8"]) == 2
    assert "num_heads=12 is not divisible by the TP degree tp=8" in capsys.readouterr().err
    with pytest.raises(ValueError, match="gpu='B200' is not one of"):
        plan_rows("wan2.1-14b", "B200", "ulysses=2")


def test_a_step_split_of_fsdp_stages_halves_every_per_step_term_and_keeps_the_latency():
    """Kept busy, two step stages each run every other step: compute, memory and the FSDP
    gathers per step all halve (a handoff per stage is added); one request still runs every
    step on one stage after another, so its latency is the stage's, plus the handoff."""
    from ppdit.analysis.hardware import predict
    from ppdit.analysis.roofline import step_handoff_bytes
    from ppdit.presets import get_preset

    one = predict("wan2.1-14b", "H100 SXM", parse_layout("ulysses=2,fsdp"), num_steps=50)
    two = predict("wan2.1-14b", "H100 SXM", parse_layout("step=2,ulysses=2,fsdp"),
                  num_steps=50, link=one.link)
    handoff = step_handoff_bytes(get_preset("wan2.1-14b").latent_shape)
    assert two.flop_s == pytest.approx(one.flop_s / 2)
    assert two.comm_bytes == pytest.approx(one.comm_bytes / 2 + handoff / 50)
    assert two.step_s < 0.51 * one.step_s
    assert one.latency_s < two.latency_s < 1.01 * one.latency_s
    assert two.weights_gb == pytest.approx(one.weights_gb)
