"""Prompt -> video from the tiny pipeline folder on gloo ranks: every layout equal to ppdit's
single device (bitwise, or within its axis' tolerance), the VAE split by rows, FSDP's shards
and a TP rank's reads from the folder; bf16 layouts on CUDA.

Runs use 5 frames at 32 x 32 (2 latent frames of 8 x 8: 32 tokens) and 3-4 steps, on the
session's live pools.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from ppdit.checkpoint.folder import load_folder
from ppdit.checkpoint.tiny import build_tiny_pipeline
from ppdit.model import build_model
from ppdit.parallel.layout import Layout, parse_layout
from ppdit.parallel.runner import run_local, run_plan
from ppdit.parallel.sequence.ring import RING_TOL
from ppdit.parallel.sequence.ulysses import SP_TOL
from ppdit.parallel.tensor.parallelize import TP_TOL
from ppdit.parallel.vae_patch.decode import PATCH_TOL
from ppdit.runtime.observe.memory import held_bytes
from ppdit.t2v.generate import encode, generate, generate_latent, prepare
from ppdit.t2v.layouts import plan_for, run_layout
from ppdit.vae.decode import decode
from tests.support.gpu import needs_cuda
from tests.support.pipelines import BF16_TOL, spec_for


def test_generate_decodes_split_by_rows_as_one_device_does(folders):
    """``--vae-ranks 2``: the latent's rows decoded on two ranks equal the one-device decode
    of the same latent within PATCH_TOL (a rank's convolutions see narrower inputs), and each
    rank's measured peak is reported."""
    spec = spec_for(folders["unipc"], num_steps=2, vae_ranks=2, text_encoder="cpu")
    got = generate(spec)
    vae = load_folder(spec.checkpoint, parts=("vae",)).vae
    torch.testing.assert_close(got.video, decode(vae, got.latent), **PATCH_TOL)
    assert got.vae.ranks == 2 and len(got.vae.peak_bytes) == 2
    assert all(p > 0 for p in got.vae.peak_bytes)
    assert "VAE decode: 2 ranks split by rows" in got.vae.sentence()


@pytest.fixture(scope="session")
def single_reference(folders):
    """ppdit's single-device latent, with CFG and with the UniPC scheduler, 4 steps."""
    spec = spec_for(folders["unipc"], num_steps=4)
    embeds = encode(spec)
    return spec, embeds, generate_latent(spec, embeds)


@pytest.mark.parametrize(("layout", "ranks"), [
    ("step", 2), ("step", 3), ("layer", 2), ("cfg", 2), ("tp", 2), ("sp", 2), ("ring", 3),
    ("ulysses=3", 3),
    ("ulysses=2,ring=2", 4), ("cfg=2,ulysses=2", 4), ("cfg=2,ulysses=2,fsdp", 4),
    ("cfg=2,tp=2", 4), ("step=2,cfg=2", 4), ("step=2,ulysses=2", 4)])
def test_layouts_equal_single_device(pools, single_reference, layout, ranks):
    """Step split (UniPC state in the handoff), layer split and CFG-parallel run the single
    device's arithmetic: bitwise. TP splits sums over ranks: ``TP_TOL``; Ulysses: ``SP_TOL``;
    Ulysses on 3 ranks deals the 4 heads 2, 1, 1; ring attention (3 ranks, 4 heads: every rank
    all heads) and USP (2 Ulysses x 2 ring) merge blocks:
    ``RING_TOL``; a composition, its least exact axis' tolerance (CFG x TP: TP's; step split of
    Ulysses stages: Ulysses'; step split of CFG-parallel stages: bitwise)."""
    spec, embeds, reference = single_reference
    spec = replace(spec, layout=parse_layout(layout, ranks))
    out = run_layout(plan_for(spec, reference.shape, embeds), pool=pools(ranks))
    mesh = spec.layout
    if mesh.ring > 1:
        torch.testing.assert_close(out.latent, reference, **RING_TOL)
    elif mesh.ulysses > 1:
        torch.testing.assert_close(out.latent, reference, **SP_TOL)
    elif mesh.tp > 1:
        torch.testing.assert_close(out.latent, reference, **TP_TOL)
    else:
        assert torch.equal(out.latent, reference)
    assert {s.rank for s in out.trace.spans} == set(range(ranks))
    if layout == "step":
        assert sum(out.handoff_bytes.values()) == 4 * reference.numel() * 4


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    """A two-expert folder (Wan 2.2's layout) of a shape no other test uses."""
    from tests.support.pipelines import MOE_SHAPE

    return build_tiny_pipeline(tmp_path_factory.mktemp("moe") / "moe", seed=5, preset=MOE_SHAPE,
                               boundary_ratio=0.875)


def test_two_experts_on_two_stages_equal_one_device_each_holding_one(pools, moe):
    """Wan 2.2 on ``--layout step --ranks 2``: the stages cut at the expert boundary (4 + 2
    steps), UniPC's memory crossing it in the handoff; bit for bit the single device, each
    rank holding one expert's parameters."""
    from ppdit.checkpoint.source import ModelSource
    from ppdit.model import num_params

    folder = moe
    spec = spec_for(folder, "step", 2, num_steps=6, guidance_scale_2=2.0)
    embeds = encode(spec)
    reference = generate_latent(spec, embeds)
    out = run_plan(plan_for(spec, reference.shape, embeds), pool=pools(2))
    assert torch.equal(out.latents[0], reference)
    one = num_params(ModelSource(folder=str(folder)).dit(experts=[1]))
    assert [out.stages[r].local_params for r in (0, 1)] == [one, one]
    assert [len(r) for r in out.plan.stages] == [4, 2]


@pytest.mark.parametrize(("layout", "ranks"), [("ulysses=2", 2), ("tp", 2), ("cfg", 2),
                                               ("step=2,ulysses=2", 4)])
def test_two_experts_on_the_forward_axes_equal_one_device(pools, moe, layout, ranks):
    """Each expert gets the forward axes (its attention routed, its heads split, its halves on
    two ranks); the results equal the single device within the axis' tolerance (CFG: bitwise)."""
    spec = spec_for(moe, num_steps=6, guidance_scale_2=2.0)
    embeds = encode(spec)
    reference = generate_latent(spec, embeds)
    spec = replace(spec, layout=parse_layout(layout, ranks))
    out = run_layout(plan_for(spec, reference.shape, embeds), pool=pools(ranks))
    tol = SP_TOL if spec.layout.ulysses > 1 else TP_TOL if spec.layout.tp > 1 else None
    if tol is None:
        assert torch.equal(out.latent, reference)
    else:
        torch.testing.assert_close(out.latent, reference, **tol)


@pytest.mark.parametrize("kind", ["fbc", "mag"])
@pytest.mark.parametrize(("layout", "ranks"), [("ulysses=2", 2), ("step", 2)])
def test_cached_layouts_equal_the_cached_single_device(pools, folders, layout, ranks, kind):
    """First-Block-Cache at 0.1 over 8 steps skips steps 1, 2, 4 and 5 on one device; MagCache
    (tests/unit/test_cache.MAG_RATIOS) steps 2, 3, 4 and 6. Ulysses' ranks decide FBC on sums
    reduced over both token slices: the same skips on both ranks, the latent within SP_TOL.
    Step split (4 + 4 steps) carries the cache in the handoff, so stage 1 skips step 4 against
    stage 0's residuals (MagCache: and its accumulated error): bit for bit."""
    from ppdit.cache import CacheConfig
    from tests.unit.test_cache import MAG_RATIOS

    cache = CacheConfig(0.1) if kind == "fbc" else CacheConfig(0.06, "mag", MAG_RATIOS)
    spec = spec_for(folders["unipc"], num_steps=8)
    embeds = encode(spec)
    single = replace(plan_for(spec, (1, 16, 2, 8, 8), embeds), cache=cache)
    reference = run_local(single)[0]
    spec = replace(spec, layout=parse_layout(layout, ranks))
    out = run_plan(replace(plan_for(spec, reference.shape, embeds), cache=cache),
                   pool=pools(ranks))
    steps = (1, 2, 4, 5) if kind == "fbc" else (2, 3, 4, 6)
    skips = [(s, b) for s in steps for b in (0, 1)]
    if layout == "step":
        assert torch.equal(out.latents[0], reference)
        logs = [out.stages[r].cache_log for r in (0, 1)]
        assert [(s, b) for log in logs for _, s, b, c in log if not c] == skips
        assert out.plan.handoff_bytes()["cache state"] > 0
    else:
        torch.testing.assert_close(out.latents[0], reference, **SP_TOL)
        assert out.cache_logs[0] == out.cache_logs[1]
        assert [(s, b) for _, s, b, c in out.cache_logs[0] if not c] == skips


def test_fsdp_beside_ulysses_equals_one_device_holding_half_the_blocks(pools, single_reference):
    """Wan's recipe on 2 ranks: Ulysses, and every block's weights sharded over the same ranks
    (FSDP2), read from the folder shard by shard. The all-gathers rebuild the exact weights:
    Ulysses' own tolerance. Each rank holds
    the root (embedders, head) whole and half of every block (FSDP splits each tensor along its
    first dimension: a (1, 6, D) table goes to one rank, so the halves differ by a little)."""
    spec, embeds, reference = single_reference
    plan = plan_for(replace(spec, layout=Layout(ulysses=2, fsdp=True)), reference.shape, embeds)
    res = run_plan(plan, pool=pools(2), timeout_s=300, echo=False)
    torch.testing.assert_close(res.latents[0], reference, **SP_TOL)
    model = plan.source.dit()
    blocks = held_bytes(model.blocks)
    root = held_bytes(model) - blocks
    assert sum(res.held_bytes) == 2 * root + blocks
    assert all(abs(b - (root + blocks / 2)) < 0.01 * blocks for b in res.held_bytes)
    # read shard by shard from the folder: no rank ever held the whole model while loading
    # (its shards and the root, plus one tensor in flight: on the tiny model the root's largest)
    assert all(0 < peak < 0.75 * (root + blocks) for peak in res.load_peak_bytes)
    # the timeline shows every block, what its gather made it wait, and the prefetch in flight
    names = {(s.rank, s.kind, s.name) for s in res.traces[0].spans}
    for rank in (0, 1):
        assert {(rank, "compute", f"block {i}") for i in range(len(model.blocks))} <= names
        assert (rank, "gather", "all-gather block 1: in flight") in names
        assert (rank, "wait", "all-gather block 0: waited") in names


def test_fsdp_beside_cfg_parallel_equals_one_device_bit_for_bit(pools, single_reference):
    """FSDP with no sequence split: each rank runs one guidance half with diffusers' own
    attention, every block gathered from the two ranks' shards: the same arithmetic as one
    device, so the same bits. FSDP alone (every rank the same video) is refused."""
    spec, embeds, reference = single_reference
    plan = plan_for(replace(spec, layout=Layout(cfg=2, fsdp=True)), reference.shape, embeds)
    res = run_plan(plan, pool=pools(2), timeout_s=300, echo=False)
    assert torch.equal(res.latents[0], reference)
    blocks = held_bytes(plan.source.dit().blocks)
    assert all(b < held_bytes(plan.source.dit()) - blocks / 3 for b in res.held_bytes)
    with pytest.raises(ValueError, match=r"not alone \(every rank would compute the same video\)"):
        prepare(spec_for(spec.checkpoint, "fsdp"))


@pytest.fixture(scope="module")
def bf16_folder(tmp_path_factory):
    """A tiny folder stored in bf16, as Wan's releases are (its fp32-kept modules included)."""
    return build_tiny_pipeline(tmp_path_factory.mktemp("bf16"), seed=3, stored=torch.bfloat16)


@pytest.mark.parametrize("layout", ["ulysses=2,fsdp", "cfg=2,fsdp"])
def test_fsdp_from_a_bf16_folder_equals_one_device(pools, bf16_folder, layout):
    """Wan's 14B recipe at its dtype: FSDP2 shards a bf16 model whose ``norm2`` and
    ``scale_shift_table`` stay fp32 (it asks one dtype of trainable parameters only, so the
    blocks are frozen before sharding). At a shape no other test uses (48 x 64, 9 frames),
    equal to one device within ``BF16_TOL``: bf16 kernels may round another batch shape
    another way."""
    spec = spec_for(bf16_folder, layout, dtype="bf16", num_steps=2, height=48, width=64,
                    num_frames=9)
    reference = generate(replace(spec, layout=Layout()))
    got = generate(spec, pool=pools(2))
    torch.testing.assert_close(got.latent, reference.latent, **BF16_TOL)
    torch.testing.assert_close(got.video, reference.video, **BF16_TOL)


def test_pp_tp_equals_single_device(pools, single_reference):
    """Two step stages of two TP ranks each: TP's rounding, nothing more."""
    spec, embeds, reference = single_reference
    plan = plan_for(replace(spec, layout=parse_layout("pp_tp", 4)), reference.shape, embeds)
    out = run_layout(plan, pool=pools(4))
    torch.testing.assert_close(out.latent, reference, **TP_TOL)


# Ring attention at bf16 rounds each block's partial output to bf16 before its fp32 merge, where
# one device's attention rounds once: another rounding, not a worse one. Its result is compared
# with the fp32 result, as one device's bf16 result is: at most this many times as far from it.
# (On an H200, gpu_runs/h200-2026-11-28-2.json, ring vs one device at bf16 differed by 0.061,
# over BF16_TOL; on this CPU: 0.070 apart, and 1.03% vs 1.02% from fp32, norm-relative.)
RING_BF16_NO_WORSE = 1.5


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("layout", ["step", "cfg", "ring", "ulysses=2"])
def test_bf16_layouts_on_cuda(folders, layout):
    """Two CUDA ranks (a GPU each, or sharing one over gloo) at bf16 vs one GPU; ring, whose
    blocks round once more, vs the fp32 result, no further from it than one GPU at bf16."""
    spec = spec_for(folders["unipc"], dtype="bf16", num_steps=4)
    embeds = encode(spec)
    reference = generate_latent(spec, embeds, device="cuda").cpu()
    plan = plan_for(replace(spec, layout=parse_layout(layout, 2)), reference.shape, embeds)
    out = run_layout(plan, device="cuda")
    if layout != "ring":
        torch.testing.assert_close(out.latent.float(), reference.float(), **BF16_TOL)
        return
    fp32 = replace(spec, dtype="fp32")
    exact = generate_latent(fp32, encode(fp32), device="cuda").cpu()
    ring, one = _relative(out.latent, exact), _relative(reference, exact)
    assert ring <= RING_BF16_NO_WORSE * one, (
        f"ring at bf16 is {ring:.3g} from the fp32 result (norm-relative), one GPU at bf16 "
        f"{one:.3g}: over the allowed {RING_BF16_NO_WORSE}x")


def test_a_tp_rank_reads_only_its_shards_from_the_folder(pools, folders):
    """TP over 2 ranks from the folder (``parallel.tensor.load``): each rank's parameters equal
    what ``parallelize_wan`` cuts from the whole loaded model, bit for bit, and the most it held
    while loading (live tensor bytes, measured) is its shards and the replicated rest plus one
    tensor in flight: below the whole model."""
    from ppdit.parallel.tensor.layers import _shard
    from ppdit.parallel.tensor.load import loading_worker
    from ppdit.runtime import launch

    folder = str(folders["unipc"])
    got = launch(loading_worker, 2, args=(folder,), pool=pools(2), timeout_s=300, echo=False)
    whole_model = build_model(checkpoint=f"{folder}/transformer")
    whole = dict(whole_model.named_parameters())
    for rank, r in enumerate(got):
        for name, p in r["params"].items():
            full = whole[name]
            dim = next((d for d in range(p.ndim) if p.shape[d] != full.shape[d]), None)
            expected = full if dim is None else _shard(full, dim, rank, 2)
            assert torch.equal(p, expected), (rank, name)
        assert r["held"] <= r["peak"] <= r["held"] + r["largest"], r
        assert r["peak"] < 0.75 * held_bytes(whole_model)
