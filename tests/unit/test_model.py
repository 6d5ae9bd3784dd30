"""The stage view must be the model, bit for bit: every parallel layout relies on it."""

from __future__ import annotations

import pytest
import torch

from ppdit.model import (
    build_model,
    condition,
    embed_patches,
    epilogue,
    forward_by_stages,
    num_params,
    run_blocks,
)
from ppdit.presets import PRESETS, get_preset


def _inputs(preset, batch, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = get_preset(preset)
    latent = torch.randn(batch, *p.latent_shape[1:], generator=g)
    t = torch.rand(batch, generator=g) * 1000
    text = torch.randn(batch, p.text_len, p.text_dim, generator=g)
    return latent, t, text


@pytest.mark.parametrize("preset,batch", [("tiny", 1), ("tiny", 3), ("small", 2)])
def test_stage_view_equals_model_bitwise(preset, batch):
    model = build_model(preset, seed=1)
    latent, t, text = _inputs(preset, batch)
    with torch.no_grad():
        ref = model(latent, t, text, return_dict=False)[0]
        out = forward_by_stages(model, latent, t, text)
    assert out.shape == latent.shape
    assert torch.equal(out, ref)


def test_blocks_split_anywhere_equal_all_blocks(tiny):
    """Running blocks [0, k) then [k, N) is the same as all N: the layer-split premise."""
    latent, t, text = _inputs("tiny", 2)
    with torch.no_grad():
        ctx = condition(tiny, tuple(latent.shape), t, text)
        h = embed_patches(tiny, latent)
        whole = run_blocks(tiny, h, ctx)
        for k in range(len(tiny.blocks) + 1):
            n = len(tiny.blocks)
            split = run_blocks(tiny, run_blocks(tiny, h, ctx, range(k)), ctx, range(k, n))
            assert torch.equal(split, whole)
        assert torch.equal(epilogue(tiny, whole, ctx), forward_by_stages(tiny, latent, t, text))


def test_same_seed_same_weights_other_seed_other_weights():
    a, b, c = build_model("tiny", seed=5), build_model("tiny", seed=5), build_model("tiny", seed=6)
    pa, pb, pc = [list(m.parameters()) for m in (a, b, c)]
    assert all(torch.equal(x, y) for x, y in zip(pa, pb, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(pa, pc, strict=True))


def test_building_leaves_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_model("tiny", seed=9)
    assert torch.equal(torch.rand(3), expected)


def test_checkpoint_round_trip(tmp_path, tiny):
    tiny.save_pretrained(tmp_path)
    loaded = build_model(checkpoint=tmp_path)
    latent, t, text = _inputs("tiny", 1)
    with torch.no_grad():
        assert torch.equal(forward_by_stages(loaded, latent, t, text),
                           forward_by_stages(tiny, latent, t, text))


def test_checkpoint_must_be_a_local_folder(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        build_model(checkpoint=tmp_path / "missing")


def test_unknown_preset_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown model preset 'huge'.*tiny"):
        build_model("huge")


def test_real_configs_match_wan_2_1():
    """Parameter counts on the meta device: 1.3B and 14B are what their names say."""
    n13 = num_params(build_model("wan2.1-1.3b", device="meta"))
    n14 = num_params(build_model("wan2.1-14b", device="meta"))
    assert 1.3e9 < n13 < 1.5e9
    assert 13.5e9 < n14 < 15e9
    assert PRESETS["wan2.1-14b"].dim == 5120 and PRESETS["wan2.1-1.3b"].dim == 1536
    assert PRESETS["wan2.1-14b"].num_tokens() == 32760


def test_bf16_keeps_the_fp32_modules():
    model = build_model("tiny", dtype=torch.bfloat16)
    assert model.blocks[0].ffn.net[0].proj.weight.dtype == torch.bfloat16
    assert model.scale_shift_table.dtype == torch.float32
    assert model.condition_embedder.time_embedder.linear_1.weight.dtype == torch.float32


def test_a_round_without_sequence_axes_leaves_the_models_attention_alone():
    """Only plans that route attention undo it after their round; a plan without sequence
    axes touches no block, so the report's dummy (it has none) runs a step split (lesson 01)."""
    from ppdit.checkpoint.source import ModelSource
    from ppdit.parallel.forward import ForwardStack
    from ppdit.parallel.layout import Layout
    from ppdit.parallel.runner import LayoutPlan

    for name in ("dummy", "tiny"):
        plan = LayoutPlan(Layout(), source=ModelSource(name))
        stack = ForwardStack(None, plan, None, plan.source.dit("cpu"))
        before = [b.attn1.processor for b in getattr(stack.model, "blocks", ())]
        with stack.round(None):
            pass
        assert [b.attn1.processor for b in getattr(stack.model, "blocks", ())] == before
