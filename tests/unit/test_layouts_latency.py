"""The one-request layouts of lesson 10's comparison: CFG-parallel and Ulysses SP bounds."""

import math

import pytest

from ppdit.analysis.hardware import LINKS, predict
from ppdit.analysis.layouts_latency import one_request_rows, predict_cfg_parallel, predict_ulysses
from ppdit.analysis.roofline import sp_traffic_per_block
from ppdit.parallel.layout import Layout
from ppdit.parallel.sequence.comms import a2a_bytes_per_layer
from ppdit.presets import get_preset


def test_cfg_parallel_is_one_forward_plus_one_exchange():
    one_forward = predict("wan2.1-14b", "H100 SXM", cfg=False)
    cfg = predict_cfg_parallel("wan2.1-14b", "H100 SXM", link="PCIe Gen5 x16")
    exchange = math.prod(get_preset("wan2.1-14b").latent_shape) * 2  # bf16 prediction
    assert cfg.gpus == 2 and cfg.latency_s == cfg.step_s
    assert cfg.comm_bytes == pytest.approx(exchange)
    assert cfg.step_s == pytest.approx(one_forward.step_s + exchange / LINKS["PCIe Gen5 x16"])
    # both halves in parallel: about half of one GPU's CFG step
    assert cfg.latency_s / predict("wan2.1-14b", "H100 SXM").latency_s == pytest.approx(0.5,
                                                                                       abs=0.01)


def test_cfg_parallel_with_tp_adds_the_tp_all_reduces():
    tp = predict("wan2.1-14b", "H100 SXM", Layout(tp=2), link="NVLink 4", cfg=False)
    both = predict_cfg_parallel("wan2.1-14b", "H100 SXM", tp=2, link="NVLink 4")
    assert both.gpus == 4 and both.comm_s > tp.comm_s
    assert both.flop_s == tp.flop_s


def test_ulysses_splits_the_work_and_pays_all_to_alls():
    one = predict("wan2.1-14b", "H100 SXM")
    sp = predict_ulysses("wan2.1-14b", "H100 SXM", degree=4, link="NVLink 4")
    # the text-side projections, the prologue and the epilogue run on every rank: within 1%
    assert sp.flop_s == pytest.approx(one.flop_s / 4, rel=0.01) and sp.flop_s > one.flop_s / 4
    assert sp.comm_s > 0 and sp.latency_s < one.latency_s / 3


def test_usp_and_cfg_compose_and_their_bytes_are_the_runtimes():
    """USP 2 x 2 does Ulysses=4's work with fewer bytes on the all-to-alls and K/V hops instead;
    CFG=2 on top halves the step again. The bytes per block are the formulas the runtime's
    counters are tested against (``a2a_bytes_per_layer``; K and V of the other groups' tokens)."""
    p = get_preset("wan2.1-14b")
    usp = predict("wan2.1-14b", "H100 SXM", Layout(ulysses=2, ring=2), link="NVLink 4")
    uly = predict("wan2.1-14b", "H100 SXM", Layout(ulysses=4), link="NVLink 4")
    both = predict("wan2.1-14b", "H100 SXM", Layout(cfg=2, ulysses=2, ring=2), link="NVLink 4")
    assert usp.gpus == 4 and both.gpus == 8
    assert usp.flop_s == pytest.approx(uly.flop_s)
    assert both.step_s == pytest.approx(usp.step_s / 2, rel=0.01)
    tokens, nb = p.num_tokens(p.latent_shape), 2
    assert sp_traffic_per_block("wan2.1-14b", ulysses=4) == a2a_bytes_per_layer(
        batch=1, tokens=tokens, dim=p.dim, degree=4, bytes_per_element=nb)
    assert sp_traffic_per_block("wan2.1-14b", ring=4) == 3 * 2 * tokens / 4 * p.dim * nb
    with pytest.raises(ValueError, match="layer split stands alone"):
        Layout(ulysses=2, layer=2)


def test_ulysses_on_a_degree_that_does_not_divide_the_heads_pays_for_its_busiest_rank():
    """12 heads on 8 ranks: the busiest rank attends with 2 heads, as on 6; its all-to-alls
    send what the runtime's counters are tested against (``a2a_bytes_per_layer`` with heads)."""
    p = get_preset("wan2.1-1.3b")
    eight, six = (predict_ulysses("wan2.1-1.3b", "H100 SXM", degree=d) for d in (8, 6))
    four = predict_ulysses("wan2.1-1.3b", "H100 SXM", degree=4)
    assert six.flop_s < four.flop_s and eight.flop_s > 0.9 * six.flop_s
    tokens = p.num_tokens(p.latent_shape)
    assert sp_traffic_per_block("wan2.1-1.3b", ulysses=8) == pytest.approx(a2a_bytes_per_layer(
        batch=1, tokens=tokens, dim=p.dim, degree=8, bytes_per_element=2, heads=12), rel=1e-3)


def test_one_request_rows_name_every_layout():
    names = [r.layout for r in one_request_rows("wan2.1-14b", "H100 SXM", "NVLink 4")]
    assert names[0] == "1 GPU" and "CFG-parallel" in names and "Ulysses SP=4" in names
    assert "CFG-parallel x TP=2" in names and "TP=4" in names
