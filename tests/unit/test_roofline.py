"""The roofline accounting must agree with what torch counts and with arithmetic done by hand.

FLOPs are checked against ``torch.utils.flop_counter.FlopCounterMode`` on real forwards of the
tiny and small presets (and a small Wan VAE). On CPU, ``F.scaled_dot_product_attention`` runs
``_scaled_dot_product_flash_attention_for_cpu``, for which FlopCounterMode has no formula (it
counts 0), so the attention runs under the MATH backend, where the counter sees its two bmms.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from ppdit.analysis.hardware import GPUS, LINKS, predict, prediction_table
from ppdit.analysis.measure import (
    op_runner,
    time_ops,
)
from ppdit.analysis.roofline import (
    attention_ops,
    block_ops,
    layer_handoff_bytes,
    model_ops,
    prologue_ops,
    ring_allreduce_traffic,
    step_handoff_bytes,
    totals,
    tp_allreduce_bytes,
)
from ppdit.analysis.roofline_vae import WAN21_VAE, WAN22_VAE, vae_decoder_ops
from ppdit.model import build_model, num_params, prologue
from ppdit.parallel.layout import Layout
from ppdit.presets import get_preset

FLOP_TOL = 0.01  # the bar; the counts are in fact exact (same formulas: 2 per MAC)
MATMUL_KINDS = ("linear", "qk", "pv", "patchify", "conv")


def _inputs(preset: str, batch: int):
    g = torch.Generator().manual_seed(0)
    p = get_preset(preset)
    latent = torch.randn(batch, *p.latent_shape[1:], generator=g)
    t = torch.rand(batch, generator=g) * 1000
    text = torch.randn(batch, p.text_len, p.text_dim, generator=g)
    return latent, t, text


def _counted(fn) -> FlopCounterMode:
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        fn()
    return fc


def _rel(a: float, b: float) -> float:
    return abs(a - b) / b


# Which diffusers module each projection / FFN op of ``block_ops`` is.
MODULES = {"attn1.to_q": "attn1.to_q", "attn1.to_k": "attn1.to_k", "attn1.to_v": "attn1.to_v",
           "attn1.to_out": "attn1.to_out.0", "attn2.to_q": "attn2.to_q",
           "attn2.to_k": "attn2.to_k", "attn2.to_v": "attn2.to_v",
           "attn2.to_out": "attn2.to_out.0", "ffn.up": "ffn.net.0.proj", "ffn.down": "ffn.net.2"}


@pytest.mark.parametrize("preset,batch", [("tiny", 1), ("tiny", 2), ("small", 1)])
def test_block_flops_match_flop_counter(preset, batch):
    """Every projection, the FFN and both attentions, module by module, on a real block."""
    torch.manual_seed(0)
    model = build_model(preset, seed=0)
    latent, t, text = _inputs(preset, batch)
    with torch.no_grad():
        h, ctx = prologue(model, latent, t, text)
    fc = _counted(lambda: model.blocks[0](h, ctx.text, ctx.timestep_proj, ctx.rotary_emb))
    counts = {k.removeprefix("WanTransformerBlock."): sum(v.values())
              for k, v in fc.get_flop_counts().items()}
    bmm = {k.removeprefix("WanTransformerBlock."): v.get(torch.ops.aten.bmm, 0)
           for k, v in fc.get_flop_counts().items()}
    ops = {o.name: o for o in block_ops(preset, batch=batch, dtype="fp32", attention="naive")}
    for name, module in MODULES.items():
        assert _rel(ops[name].flops, counts[module]) <= FLOP_TOL, name
    for attn in ("attn1", "attn2"):
        analytic = ops[f"{attn}.qk"].flops + ops[f"{attn}.pv"].flops
        assert _rel(analytic, bmm[attn]) <= FLOP_TOL, attn
    matmuls = sum(o.flops for o in ops.values() if o.kind in MATMUL_KINDS)
    assert _rel(matmuls, fc.get_total_flops()) <= FLOP_TOL


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_model_flops_match_flop_counter(preset):
    """The whole forward: patch embedding, condition embedder, all blocks, proj_out."""
    model = build_model(preset, seed=0)
    latent, t, text = _inputs(preset, 2)
    fc = _counted(lambda: model(latent, t, text, return_dict=False))
    ops = model_ops(preset, batch=2, dtype="fp32", attention="naive")
    matmuls = sum(o.flops * o.count for o in ops if o.kind in MATMUL_KINDS)
    assert _rel(matmuls, fc.get_total_flops()) <= FLOP_TOL


@pytest.mark.parametrize("wan22", [False, True])
def test_vae_decoder_flops_match_flop_counter(wan22):
    """Convs and the mid-block attention of a real (narrow) Wan 2.1 VAE decode, frame by frame;
    and of Wan 2.2's (residual blocks, 12 output channels for 2x2 pixels, 48 latent ones)."""
    from diffusers import AutoencoderKLWan

    config = {"base_dim": 8}  # Wan's structure, 12x narrower than the real 96
    if wan22:
        config = {**WAN22_VAE, "base_dim": 8, "decoder_base_dim": 16, "z_dim": 48,
                  "in_channels": 12, "patch_size": 2, "latents_mean": [0.0] * 48,
                  "latents_std": [1.0] * 48}
    torch.manual_seed(0)
    vae = AutoencoderKLWan(**config).eval()
    z = torch.randn(1, 48 if wan22 else 16, 3, 4, 4)
    fc = _counted(lambda: vae.decode(z))
    by_op = fc.get_flop_counts()["Global"]
    ops = vae_decoder_ops(tuple(z.shape), config=config, attention="naive")
    convs = sum(o.flops for o in ops if o.kind == "conv")
    attn = sum(o.flops for o in ops if o.kind in ("qk", "pv"))
    assert _rel(convs, by_op[torch.ops.aten.convolution]) <= FLOP_TOL
    assert _rel(attn, by_op[torch.ops.aten.bmm]) <= FLOP_TOL


def test_the_vae_count_reads_diffusers_defaults():
    """The VAE sizes the count writes out (so ``ppdit plan`` needs no diffusers) are the
    installed diffusers' ``AutoencoderKLWan`` defaults."""
    import inspect

    from diffusers import AutoencoderKLWan

    defaults = inspect.signature(AutoencoderKLWan.__init__).parameters
    assert {k: defaults[k].default for k in WAN21_VAE} == WAN21_VAE


def test_vae_frames_follow_the_causal_decode():
    """3 latent frames decode to 1 + 4 * 2 = 9 frames at 8x the resolution (conv_out's shape)."""
    out = vae_decoder_ops((1, 16, 3, 4, 4), config={"base_dim": 8})[-1]
    assert out.name == "conv_out"
    assert out.dims[2:6] == (9, 32, 32, 3)


def test_bytes_of_projections_ffn_attention_tiny():
    """tiny, fp32 (4 bytes), batch 1: S = 5*8*8 = 320 tokens, D = 64, ffn 128, H = 4 x 16,
    L = 8 text tokens. Minimum bytes = inputs read once + outputs written once (+ weights)."""
    ops = {o.name: o for o in block_ops("tiny", dtype="fp32")}
    naive = {o.name: o for o in block_ops("tiny", dtype="fp32", attention="naive")}
    # to_q: x (320x64) + W (64x64) + y (320x64) = 20480 + 4096 + 20480 = 45056 elements
    assert ops["attn1.to_q"].bytes == 45056 * 4
    assert ops["attn1.to_q"].flops == 2 * 320 * 64 * 64  # 2,621,440
    # cross-attention k on the text: x (8x64) + W (64x64) + y (8x64) = 512 + 4096 + 512
    assert ops["attn2.to_k"].bytes == 5120 * 4
    # FFN up: x (320x64) + W (64x128) + y (320x128) = 20480 + 8192 + 40960 = 69632
    assert ops["ffn.up"].bytes == 69632 * 4
    # FFN down: x (320x128) + W (128x64) + y (320x64) = 40960 + 8192 + 20480 = 69632
    assert ops["ffn.down"].bytes == 69632 * 4
    # fused self-attention: Q, K, V, O of 320x64 each = 81920 elements
    assert ops["attn1.sdpa"].bytes == 81920 * 4
    # fused cross-attention: Q and O 320x64, K and V 8x64 = 40960 + 1024
    assert ops["attn2.sdpa"].bytes == 41984 * 4
    # naive: QK^T reads Q, K (2 x 20480) and writes 4 heads x 320 x 320 = 409600 scores
    assert naive["attn1.qk"].bytes == (40960 + 409600) * 4
    assert naive["attn1.softmax"].bytes == 2 * 409600 * 4
    assert naive["attn1.pv"].bytes == (409600 + 40960) * 4


def test_bytes_of_projections_ffn_attention_14b_480p():
    """wan2.1-14b, bf16, latent (1,16,21,60,104): S = 21*30*52 = 32760, D = 5120, ffn 13824."""
    ops = {o.name: o for o in block_ops("wan2.1-14b", dtype="bf16")}
    # S*D = 167,731,200; D*D = 26,214,400 -> (2 * 167,731,200 + 26,214,400) * 2 bytes
    assert ops["attn1.to_q"].bytes == 723_353_600
    # S*F = 452,874,240; D*F = 70,778,880 -> (167,731,200 + 70,778,880 + 452,874,240) * 2
    assert ops["ffn.up"].bytes == 1_382_768_640
    # flash self-attention: Q, K, V, O = 4 * S*D elements * 2 bytes
    assert ops["attn1.sdpa"].bytes == 1_341_849_600
    # naive scores alone: 40 heads * 32760^2 = 42,928,704,000 elements, written and read twice
    naive = {o.name: o for o in block_ops("wan2.1-14b", dtype="bf16", attention="naive")}
    assert naive["attn1.softmax"].bytes == 2 * 42_928_704_000 * 2


def test_flash_and_naive_have_equal_flops_and_differ_by_the_scores():
    """Same FLOPs; naive moves the (B, H, S, S_kv) scores 4 more times, in both attentions."""
    p = get_preset("small")
    flash, naive = totals(block_ops(p, batch=2)), totals(block_ops(p, batch=2, attention="naive"))
    s, h, b = p.num_tokens(), p.num_heads, 2
    assert flash.flops == naive.flops
    assert naive.bytes - flash.bytes == 4 * b * h * s * (s + p.text_len) * 2


def test_tensor_parallel_rank_gets_its_share():
    full, half = block_ops("wan2.1-14b"), block_ops("wan2.1-14b", tp=2)
    for a, b in zip(full, half, strict=True):
        if a.kind in ("linear", "sdpa"):
            assert b.flops * 2 == a.flops, a.name
        if a.kind in ("layernorm", "add"):  # replicated on the full width
            assert b == a, a.name
    with pytest.raises(ValueError, match="tp=8 must divide num_heads=12"):
        block_ops("wan2.1-1.3b", tp=8)


def test_weights_counted_by_the_ops_are_the_model_parameters():
    """Linear + conv weights cover all but biases and norm vectors (< 0.2%) of the model."""
    for preset in ("wan2.1-1.3b", "wan2.1-14b"):
        n = num_params(build_model(preset, device="meta"))
        assert 0 <= 1 - totals(model_ops(preset)).weights / n < 2e-3


def test_communication_bytes_by_hand():
    # the 480p latent in fp32: 16 * 21 * 60 * 104 = 2,096,640 elements * 4 bytes
    assert step_handoff_bytes((1, 16, 21, 60, 104)) == 8_386_560
    # h for the 14B at 480p in bf16: 32760 * 5120 * 2
    assert layer_handoff_bytes("wan2.1-14b") == 335_462_400
    # TP: 3 x h plus fp32 RMS statistics (3 * 32760 + 512) * 4 = 395,168
    assert tp_allreduce_bytes("wan2.1-14b") == 3 * 335_462_400 + 395_168
    assert ring_allreduce_traffic(1000, 4) == 1500


def test_prediction_14b_480p_h100_bf16_one_step_by_hand():
    """Wan 2.1-14B, 480p, one H100 SXM, bf16, CFG (2 forwards), flash attention.

    Derivation (S=32760, D=5120, F=13824, L=512, H=40, text 4096; peak 989.4e12 FLOP/s,
    3.35e12 B/s; ridge 295 FLOP/B). Each op costs max(FLOPs/peak, bytes/bw):

    compute-bound per block (every matmul has intensity >= 427 FLOP/B, attention ~16,000):
      12 S D^2 (q,k,v,out; cross q,out)  = 10,305,404,928,000
      4 L D^2  (cross k,v on the text)   =     53,687,091,200
      4 S D F  (FFN)                     =  9,274,864,435,200
      4 S^2 D + 5 H S^2 (self-attention) = 22,194,139,968,000
      4 S L D + 5 H S L (cross-attention)=    346,868,121,600
      per block                          = 42,174,964,544,000;  x 40 blocks
    + text embedder 2*512*4096*5120 + 2*512*5120^2 = 48,318,382,080
    = 1,687,046,900,142,080 FLOPs / 989.4e12 = 1.705121 s per forward

    bandwidth-bound (norms, rope, residuals, GELU; intensity < 1 FLOP/B), bytes at 2 B/elt:
      per block (25 S D + 2 L D + 2 S F) * 2 = 10,208,542,720;  x 40 = 408,341,708,800
      patch embedding (intensity 63)       340,311,040
      time embedder (B = 1: weights only)   2,632,192 + 52,449,280
      time_proj (a 5120 x 30720 weight)    314,644,480
      text GELU                             10,485,760
      norm_out, proj_out (intensity 63)    670,924,800 + 340,311,040
      = 410,073,467,392 bytes / 3.35e12 = 0.122410 s per forward

    step = 2 x (1.705121 + 0.122410) s = 3.6551 s.
    """
    row = predict("wan2.1-14b", "H100 SXM", Layout(), dtype="bf16", cfg=True)
    assert row.step_s == pytest.approx(3.6551, rel=2e-4)
    assert row.flop_s == pytest.approx(2 * 1.705121, rel=2e-4)
    assert row.memory_s == pytest.approx(2 * 0.122410, rel=2e-4)
    assert row.bound == "compute" and row.comm_s == 0 and row.latency_s == row.step_s
    assert row.weights_gb == pytest.approx(28.57, rel=2e-3) and row.fits
    # the same derivation as arithmetic, independent of the library's op list
    s, d, f, l_txt, h = 32760, 5120, 13824, 512, 40
    flops = 40 * (12 * s * d * d + 4 * l_txt * d * d + 4 * s * d * f + 4 * s * s * d
                  + 5 * h * s * s + 4 * s * l_txt * d + 5 * h * s * l_txt) + (
        2 * 512 * 4096 * 5120 + 2 * 512 * 5120 * 5120)
    nbytes = 40 * (25 * s * d + 2 * l_txt * d + 2 * s * f) * 2 + 1_731_758_592
    assert row.step_s == pytest.approx(2 * (flops / 989.4e12 + nbytes / 3.35e12), rel=1e-9)


def test_layouts_split_the_work_as_described():
    single = predict("wan2.1-14b", "H100 SXM")
    tp2 = predict("wan2.1-14b", "H100 SXM", Layout(tp=2), link="NVLink 4")
    tp2_pcie = predict("wan2.1-14b", "H100 SXM", Layout(tp=2), link="PCIe Gen5 x16")
    step4 = predict("wan2.1-14b", "H100 SXM", Layout(step=4))
    layer4 = predict("wan2.1-14b", "H100 SXM", Layout(layer=4))
    # TP halves the matmul and attention FLOPs; all-reduce time scales with 1 / link bandwidth
    assert tp2.flop_s < single.flop_s / 2 * 1.01
    assert tp2_pcie.comm_s / tp2.comm_s == pytest.approx(LINKS["NVLink 4"] / LINKS["PCIe Gen5 x16"])
    # 40 blocks x 2 forwards x ring(1 message over 2 ranks) = 1 x the message per block
    assert tp2.comm_bytes == 80 * tp_allreduce_bytes("wan2.1-14b")
    # step-split: 4x throughput when busy, no faster for one request
    assert step4.step_s == pytest.approx(single.step_s / 4, rel=1e-3)
    assert step4.latency_s >= single.latency_s
    # layer-split: 10 blocks per stage (+ prologue on stage 0), one h per forward
    assert layer4.comm_bytes == 2 * layer_handoff_bytes("wan2.1-14b")
    assert layer4.weights_gb < single.weights_gb / 3.5
    # weights of the 14B do not fit one 24 GB card; a quarter of them do
    assert not predict("wan2.1-14b", "RTX 4090").fits
    assert predict("wan2.1-14b", "RTX 4090", Layout(tp=4)).fits
    with pytest.raises(ValueError, match="at least one block per stage"):
        predict("wan2.1-1.3b", "H100 SXM", Layout(layer=64))


def test_prediction_table_covers_every_model_gpu_layout_and_link():
    rows = prediction_table()
    per_model = sum(1 + 4 * len(g.links) for g in GPUS.values())  # 1 GPU + 4 multi-GPU layouts
    assert len(rows) == 2 * per_model
    assert all(r.step_s > 0 and r.latency_s > 0 for r in rows)


def test_every_op_kind_runs_with_its_shapes():
    """The op runners build tensors from ``Op.dims``: every kind must run (and time) on CPU."""
    ops = (block_ops("tiny", dtype="fp32") + block_ops("tiny", attention="naive")
           + prologue_ops("tiny") + vae_decoder_ops((1, 16, 2, 2, 2), config={"base_dim": 8})[:3]
           + attention_ops("x", 1, 1, 4, 4, 8, 4))
    assert {o.kind for o in ops} >= {"linear", "sdpa", "qk", "softmax", "pv", "layernorm",
                                     "rmsnorm", "rope", "gelu", "add", "patchify", "conv"}
    for op in ops:
        op_runner(op)()
    timed = time_ops(ops[:2], min_time_s=1e-3)
    assert all(t.seconds > 0 and t.achieved_flops > 0 for t in timed)


def test_explorer_draws_defaults_and_explains_impossible_choices():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ppdit.analysis.roofline import latent_for
    from ppdit.viz.roofline import explorer_figure, explorer_multiples, make_explorer

    assert latent_for("480p", 81) == (1, 16, 21, 60, 104)
    fig = explorer_figure()
    assert "32,760 tokens" in fig.get_suptitle()
    bad = explorer_figure(model="wan2.1-1.3b", tp=8)
    assert "must divide num_heads=12" in bad.axes[0].texts[0].get_text()
    assert len(make_explorer().children) == 3  # two rows of controls and the output
    h100 = {"gpu": "H100 SXM", "resolution": "480p", "frames": 81, "dtype": "bf16"}
    grid = explorer_multiples([{**h100, "model": "wan2.1-14b", "tp": 1},
                               {**h100, "model": "wan2.1-14b", "tp": 8},
                               {**h100, "model": "wan2.1-1.3b", "tp": 1}])
    titled = [ax.get_title() for ax in grid.axes if ax.axison]
    assert len(titled) == 3 and "TP=8" in titled[1] and "32,760 tokens" in titled[1]
    plt.close("all")


def test_the_bandwidth_bound_line_in_tokens_per_gpu():
    """The crossing is where a projection's intensity m D / (2 m + D) (bf16) meets the ridge;
    a 480p video is far above it, one 480p frame over 8 GPUs far below (lesson 10)."""
    from ppdit.analysis.hardware import GPUS, bandwidth_bound_share, bandwidth_bound_tokens

    h100 = GPUS["H100 SXM"]
    m = bandwidth_bound_tokens(5120, h100.ridge("bf16"))
    assert m * 5120 / (2 * m + 5120) == pytest.approx(h100.ridge("bf16"))
    assert round(m) == 334 and round(bandwidth_bound_tokens(1536, h100.ridge("bf16"))) == 480
    full = bandwidth_bound_share("wan2.1-1.3b", (1, 16, 21, 60, 104), h100)
    frame = bandwidth_bound_share("wan2.1-1.3b", (1, 16, 1, 60, 104), h100, sp=8)
    assert full < 0.2 < 0.8 < frame
