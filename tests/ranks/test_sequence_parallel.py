"""Sequence parallelism on real ranks: Ulysses (with and without V first, and V-Major), ring
attention and diffusers' own Ulysses each equal one device; bytes as the formula says."""

from __future__ import annotations

import pytest
import torch

from ppdit.parallel.layout import Layout, check_sp_degree
from ppdit.parallel.runner import LayoutPlan, run_layouts
from ppdit.parallel.sequence.comms import a2a_bytes_per_layer, even_split
from ppdit.parallel.sequence.ring import RING_TOL
from ppdit.parallel.sequence.ulysses import SP_TOL
from ppdit.presets import get_preset
from ppdit.sampler import Request, SamplingConfig, generate


@pytest.mark.parametrize("degree,shapes", [(2, (None, (1, 16, 5, 14, 18))), (4, (None,))])
def test_sp_equals_one_device_with_and_without_v_first(degree, shapes, tiny, pools):
    """... and on 4 ranks the all-to-alls in two phases over 2 nodes of 2 (``topology``): the
    same values moved, so bit for bit the flat result."""
    two = SamplingConfig(num_steps=2)
    uly = Layout(ulysses=degree)
    plans = {(s, v): LayoutPlan(uly, sampling=two, v_first=v, latent_shape=s) for s in shapes
             for v in (True, False)}  # the second shape has 315 tokens: uneven slices
    hier = {"hier": LayoutPlan(uly, sampling=two, ranks_per_node=2)} if degree == 4 else {}
    results = run_layouts({**{str(k): p for k, p in plans.items()}, **hier}, timeout_s=300,
                      echo=False, pool=pools(degree))
    if hier:
        flat = results[str((None, True))]
        assert torch.equal(results["hier"].latents[0], flat.latents[0])
        intra, inter, messages = results["hier"].hierarchy
        # each rank's flat all-to-all sends 3/4 of its data: 1/4 to its node peer (phase 1 moves
        # half: the peer's share and the far peer's), 2/4 across; phase 2 sends the far node
        # its own half plus what the node peer handed over, in one message instead of two
        assert inter == flat.a2a_bytes * 2 // 3 and intra == flat.a2a_bytes * 2 // 3
        layers = get_preset("tiny").num_layers
        assert messages == 4 * layers * two.num_steps  # one per all-to-all, not two
    for key, plan in plans.items():
        res = results[str(key)]
        ref = generate(tiny, Request(0, 0), sampling=two, latent_shape=plan.shape)
        assert len(res.rank_latents) == degree
        for rank_latents in res.rank_latents:
            torch.testing.assert_close(rank_latents[0], ref, **SP_TOL)
        tokens = get_preset("tiny").num_tokens(plan.shape)
        layers = get_preset("tiny").num_layers
        if tokens % degree == 0:
            per_layer = a2a_bytes_per_layer(batch=1, tokens=tokens, dim=64, degree=degree,
                                             bytes_per_element=4)
            assert res.a2a_bytes == per_layer * layers * two.num_steps
        assert res.a2a_calls == 4 * layers * two.num_steps


@pytest.mark.parametrize("degree,shapes", [(2, (None, (1, 16, 5, 14, 18)))])
def test_ring_attention_equals_one_device_for_any_head_count(degree, shapes, tiny, pools):
    """Ring attention on real ranks, uneven slices included, under NCCL's rules: equal to one
    device within RING_TOL; each rank sends its K/V block P - 1 times per layer and step.
    (3 ranks on the tiny model's 4 heads: ``test_t2v``'s ring case.)"""
    two = SamplingConfig(num_steps=2)
    plans = {str(s): LayoutPlan(Layout(ring=degree), sampling=two, latent_shape=s)
             for s in shapes}
    results = run_layouts(plans, timeout_s=300, echo=False, pool=pools(degree))
    preset = get_preset("tiny")
    for plan, res in ((p, results[k]) for k, p in plans.items()):
        ref = generate(tiny, Request(0, 0), sampling=two, latent_shape=plan.shape)
        for rank_latents in res.rank_latents:
            torch.testing.assert_close(rank_latents[0], ref, **RING_TOL)
        split = even_split(preset.num_tokens(plan.shape), degree)
        blocks = sum(split[(0 - s) % degree] for s in range(degree - 1))  # rank 0 forwards
        per_layer = 2 * blocks * preset.num_heads * preset.head_dim * 4  # K and V, fp32
        assert res.ring_bytes == per_layer * preset.num_layers * two.num_steps


def test_ulysses_runs_a_degree_that_does_not_divide_the_heads(tiny, pools):
    """3 ranks on the tiny model's 4 heads (2, 1, 1 heads per rank; 315 tokens: uneven slices
    too): equal to one device within SP_TOL, rank 0 sending what the formula with ``heads``
    says; V-Major, whose chunks are even, still refuses with its rule."""
    two, shape = SamplingConfig(num_steps=2), (1, 16, 5, 14, 18)
    res = run_layouts({"u3": LayoutPlan(Layout(ulysses=3), sampling=two, latent_shape=shape)},
                      timeout_s=300, echo=False, pool=pools(3))["u3"]
    ref = generate(tiny, Request(0, 0), sampling=two, latent_shape=shape)
    for rank_latents in res.rank_latents:
        torch.testing.assert_close(rank_latents[0], ref, **SP_TOL)
    preset = get_preset("tiny")
    per_layer = a2a_bytes_per_layer(batch=1, tokens=preset.num_tokens(shape), dim=64, degree=3,
                                     bytes_per_element=4, heads=preset.num_heads)
    assert res.a2a_bytes == per_layer * preset.num_layers * two.num_steps
    with pytest.raises(ValueError, match="must divide the 4 attention heads for V-Major"):
        check_sp_degree(4, 3)


def test_v_major_sends_only_changed_rows(tiny, pools):
    """V-Major (``vmajor``): at threshold 0 every changed row travels, so the result is the
    plain all-to-all's bit for bit; at an unreachable threshold only the first step's rows
    travel (half of two steps') and the result drifts; the ablation on the trained toy
    (``ppdit.toy.vmajor``) runs end to end, its exact rows with no error."""
    from ppdit.toy.vmajor import run_ablation

    two = SamplingConfig(num_steps=2)
    uly = Layout(ulysses=2)
    plans = {"exact": LayoutPlan(uly, sampling=two),
             "0": LayoutPlan(uly, sampling=two, v_major=0.0),
             "never": LayoutPlan(uly, sampling=two, v_major=1e9)}
    res = run_layouts(plans, timeout_s=300, echo=False, pool=pools(2))
    assert torch.equal(res["0"].latents[0], res["exact"].latents[0])
    sent, total, _, _ = res["never"].vmajor
    assert sent * 2 == total
    assert not torch.equal(res["never"].latents[0], res["exact"].latents[0])
    rows = run_ablation(n=1, thresholds=(0.0,), steps=2, timeout_s=300, echo=False,
                        pool=pools(2))
    assert [r.max_pixel_error for r in rows] == [0.0, 0.0]
    assert rows[1].bytes_saved <= 0  # every row changed: only the masks' bytes were added
    with pytest.raises(ValueError, match="v_major=0.1 needs a Ulysses-only layout"):
        LayoutPlan(Layout(ring=2), v_major=0.1)


@pytest.mark.parametrize(("preset", "shape"), [("tiny", (1, 16, 2, 8, 8)),
                                               ("tiny-ti2v", (1, 48, 3, 8, 8))])
def test_diffusers_context_parallel_ulysses_equals_ppdits(pools, preset, shape):
    """diffusers' own ``ContextParallelConfig(ulysses_degree=2)`` on CPU ranks (its device
    count patched: ``diffusers_cp``) and ppdit's Ulysses, one forward on the same weights:
    both equal one device within SP_TOL (bitwise on this machine), and each is timed. TI2V:
    a timestep per token, the first frame's at 0, split by diffusers' plan and by ppdit."""
    from ppdit.runtime.processes.launch import launch
    from tests.support.diffusers_cp import compare_worker

    out = launch(compare_worker, 2, args=(preset, shape), pool=pools(2))
    for r in out:
        torch.testing.assert_close(r["diffusers"], r["one"], **SP_TOL)
        torch.testing.assert_close(r["ppdit"], r["one"], **SP_TOL)
        assert all(len(v) == 3 for v in r["seconds"].values())


def test_ring_runs_in_the_layout_comparison(pools):
    """``LayoutCompare`` times ring attention beside one device when asked (gpu-check's rows,
    ``benchmarks/sequence_parallel.py``); a comparison without 'one device' first is refused."""
    from ppdit.analysis.layout_compare import RING, LayoutCompare, run_compare
    from ppdit.checkpoint.source import ModelSource

    spec = LayoutCompare(source=ModelSource("tiny"), latent_shape=(1, 16, 2, 8, 8), forwards=1,
                         variants=("one device", RING))
    res = run_compare(spec, pool=pools(2), echo=False)
    assert set(res.rounds) == {"one device", RING} and len(res.rounds[RING]) == 3
    with pytest.raises(ValueError, match="'one device' first"):
        LayoutCompare(variants=(RING,))
