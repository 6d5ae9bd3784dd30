"""PipeFusion on real gloo ranks: with every step a warm-up it is layer split, bit for bit;
with displaced patches it is close to it, by a PSNR floor; ``generate`` runs it on a folder."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from ppdit.parallel.layout import Layout, parse_layout
from ppdit.parallel.runner import LayoutPlan, run_plan
from ppdit.sampler import SamplingConfig
from ppdit.t2v.generate import generate
from ppdit.toy.caching import psnr_db as psnr
from tests.support.pipelines import spec_for

STEPS = SamplingConfig(num_steps=4)  # unguided: one sample a micro-batch in both loops
# What displaced patches may cost against the exact result on the tiny preset: one step of
# stale K/V for the patches after each one moves a latent of size ~1 by ~1e-2 (max |diff|
# 0.01 over 4 steps), a PSNR near 40 dB; the floor leaves room for other seeds and shapes.
PSNR_FLOOR_DB = 25.0


@pytest.fixture(scope="module")
def exact(pools):
    return run_plan(LayoutPlan(layout=Layout(layer=2), sampling=STEPS), pool=pools(2)).latents[0]


def test_every_step_warm_is_layer_split_bit_for_bit(pools, exact):
    plan = LayoutPlan(layout=Layout(pipefusion=2), sampling=STEPS, patches=4, warmup_steps=4)
    assert torch.equal(run_plan(plan, pool=pools(2)).latents[0], exact)


@pytest.mark.parametrize(("warmup", "patches"), [(0, 2), (1, 4), (2, 4)])
def test_displaced_patches_stay_close_to_the_exact_result(pools, exact, warmup, patches):
    plan = LayoutPlan(layout=Layout(pipefusion=2), sampling=STEPS, patches=patches,
                      warmup_steps=warmup)
    got = run_plan(plan, pool=pools(2)).latents[0]
    assert not torch.equal(got, exact)  # lossy: the stale K/V did something
    assert psnr(got, exact) > PSNR_FLOOR_DB


def test_generate_runs_pipefusion_on_a_folder(pools, folders):
    """``ppdit generate --layout pipefusion=2`` on a tiny folder, guided, with its scheduler:
    a video close to layer split's."""
    spec = spec_for(folders["unipc"], "pipefusion=2")
    got = generate(spec)
    ref = generate(replace(spec, layout=parse_layout("layer=2")))
    assert got.video.shape == ref.video.shape
    assert psnr(got.latent, ref.latent) > PSNR_FLOOR_DB


def test_rank_0_decodes_previews_beside_its_blocks_and_the_result_stays(pools):
    """StreamDiffusionV2's first rank also decodes: with ``decode_previews`` rank 0 decodes the
    first frame of every latent that comes back to it (steps 1.., each micro-batch), and the
    latents are those of the same plan without it, bit for bit. A forced split runs as told."""
    from ppdit.parallel.layer_split.run import run_layer_splits
    from ppdit.parallel.layer_split.schedule import LayerSplitPlan
    from ppdit.parallel.partition import forced_costs
    from ppdit.sampler import Request

    plain = LayerSplitPlan(tuple(Request(i, i) for i in range(2)), 2, 2, sampling=STEPS)
    plans = {"plain": plain, "previews": replace(plain, decode_previews=True,
                                                 block_costs=forced_costs([1, 3]))}
    res = run_layer_splits(plans, 1, echo=False, pool=pools(2))
    decodes = [s for s in res["previews"].trace.spans if s.kind == "decode"]
    assert {s.rank for s in decodes} == {0} and len(decodes) == 2 * (STEPS.num_steps - 1)
    assert not any(s.kind == "decode" for s in res["plain"].trace.spans)
    assert all(torch.equal(res["plain"].latents[i], res["previews"].latents[i]) for i in (0, 1))
