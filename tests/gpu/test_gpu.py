"""Every layout on CUDA: 2-4 ranks on the GPU(s) present (sharing one GPU over gloo with host
staging, or a GPU each over NCCL), each equal to the same model on one GPU.

Skipped without a GPU (with the reason); ``make gpu-check`` runs them on a GPU machine, and so
does ``make test`` there. References are computed on ``cuda:0`` with the same weights: the
ranks run the same kernels, but cuDNN / cuBLAS may pick other algorithms in another process or
for another batch shape, so results agree to ``GPU_TOL``, not bitwise. TP adds its own
reordering (``TP_TOL_BY_DTYPE``); graph replay against eager keeps ``GRAPH_TOL``.
"""

from __future__ import annotations

import pytest
import torch

from ppdit.analysis.layout_compare import RING, VARIANTS, LayoutCompare, run_compare
from ppdit.analysis.tp_styles import TPCompare, TPVariant, run_tp_compare
from ppdit.checkpoint.source import ModelSource
from ppdit.model import build_model
from ppdit.parallel.decode_overlap.plan import OverlapPlan
from ppdit.parallel.decode_overlap.run import overlap_reference, run_decode_overlap
from ppdit.parallel.layer_split.run import layer_split_reference, run_layer_splits
from ppdit.parallel.layer_split.schedule import LayerSplitPlan
from ppdit.parallel.layout import Layout
from ppdit.parallel.runner import LayoutPlan, run_layouts
from ppdit.parallel.step_split.plan import make_plan
from ppdit.parallel.step_split.run import run_step_split, run_step_splits
from ppdit.parallel.tensor.parallelize import TP_TOL_BY_DTYPE
from ppdit.runtime import RankError, RankPool
from ppdit.sampler import Request, SamplingConfig, generate
from ppdit.serve.config import BringupConfig
from ppdit.serve.system import reference_stream, run_bringup
from ppdit.vae.presets import build_vae
from tests.conftest import GRAPH_TOL

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA GPU: every layout on CUDA ranks (run `make gpu-check` on a GPU box)")]

# Another process may choose other cuDNN / cuBLAS algorithms for the same shapes (and TF32 is
# cuDNN's default for convolutions): agreement to ~1e-3 of values of size ~1, not bitwise.
GPU_TOL = {"rtol": 2e-3, "atol": 2e-3}
FOUR = SamplingConfig(num_steps=4)


@pytest.fixture(scope="module")
def pool2():
    with RankPool(2, device="cuda", threads_per_rank=1, timeout_s=600, echo=False) as pool:
        yield pool


def _close(out: torch.Tensor, ref: torch.Tensor, tol=GPU_TOL) -> None:
    torch.testing.assert_close(out.cpu().float(), ref.cpu().float(), **tol)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_step_split_on_cuda(pool2, dtype):
    plan = make_plan(2, 2, sampling=FOUR, source=ModelSource(dtype=dtype))
    res = run_step_splits({"p": plan}, rounds=1, pool=pool2)["p"]
    model = build_model("tiny", seed=0, dtype=dtype, device="cuda")
    tol = GPU_TOL if dtype == "fp32" else TP_TOL_BY_DTYPE["bf16"]
    for r in plan.requests:
        _close(res.latents[r.request_id], generate(model, r, sampling=FOUR), tol)


def test_layer_split_wrap_and_interleaving_on_cuda(pool2):
    reqs = tuple(Request(i, i) for i in range(4))
    plans = {"wrap": LayerSplitPlan(reqs, 2, 4, sampling=FOUR),
             "v2": LayerSplitPlan(reqs, 2, 4, virtual=2, wrap=False, sampling=FOUR)}
    runs = run_layer_splits(plans, pool=pool2)
    model = build_model("tiny", seed=0, device="cuda")
    for name, res in runs.items():
        ref = layer_split_reference(model, plans[name])
        for k in ref:
            _close(res.latents[k], ref[k])


def test_tensor_parallel_on_cuda(pool2):
    shared = pool2.placement.staged
    variants = [TPVariant("single"), TPVariant("funcol"), TPVariant("c10d")]
    if not shared:  # DTensor and compiled collectives need a GPU per rank (NCCL)
        variants += [TPVariant("dtensor"), TPVariant("funcol", compiled=True)]
    res = run_tp_compare(TPCompare(tuple(variants), rounds=0), 2, pool=pool2)[0]
    for v in variants[1:]:
        _close(res[v.name].output, res["single"].output, TP_TOL_BY_DTYPE["fp32"])
    if shared:
        with pytest.raises(RankError, match="staged|gloo cannot move CUDA tensors"):
            run_tp_compare(TPCompare((TPVariant("dtensor"),), rounds=0), 2, pool=pool2)


def test_sequence_parallel_on_cuda(pool2):
    two = SamplingConfig(num_steps=2)
    res = run_layouts({str(v): LayoutPlan(Layout(ulysses=2), sampling=two, v_first=v)
                       for v in (True, False)}, pool=pool2)
    ref = generate(build_model("tiny", seed=0, device="cuda"), Request(0, 0), sampling=two)
    for r in res.values():
        for latents in r.rank_latents:
            _close(latents[0], ref)


def test_layouts_side_by_side_on_cuda(pool2):
    spec = LayoutCompare(source=ModelSource("tiny"), latent_shape=(1, 16, 4, 16, 16),
                         forwards=1, rounds=1, variants=(*VARIANTS, RING))
    res = run_compare(spec, pool=pool2)
    assert set(res.seconds) == {"one device", "SP, V-first", "SP, V last", "TP", RING}


def test_decode_overlap_on_cuda(pool2):
    plan = OverlapPlan(num_chunks=2, sampling=SamplingConfig(num_steps=2))
    res = run_decode_overlap({"p": plan}, pool=pool2)["p"]
    latents, video = overlap_reference(build_model("tiny", seed=0, device="cuda"),
                                       build_vae("tiny", seed=0).cuda(), plan)
    _close(res.latents, latents)
    _close(res.video, video)


def test_gpu_overlap_with_graph_runner_matches_reference():
    plan = OverlapPlan(num_chunks=3, sampling=FOUR, use_graph_runner=True)
    # One GPU is enough: the generator's graph holds no communication (P2P stays outside it),
    # so the ranks may share the GPU over gloo with staged messages.
    res = run_decode_overlap({"gpu": plan}, timeout_s=300, echo=False, device="cuda")["gpu"]
    model = plan.source.dit("cuda")
    vae = plan.source.vae("cuda")
    latents, video = overlap_reference(model, vae, plan)  # eager, on one GPU
    torch.testing.assert_close(res.latents.cpu(), latents.cpu(), **GRAPH_TOL)
    torch.testing.assert_close(res.video.cpu(), video.cpu(), **GRAPH_TOL)


def test_bringup_overlap_on_cuda(pool2):
    cfg = BringupConfig(phase="overlap", chunks=3, num_steps=2)
    res = run_bringup(cfg, pool=pool2)
    ref = reference_stream(cfg, build_model("tiny", seed=0, device="cuda"))
    for key, latent in res.controller.latents.items():
        _close(latent, ref[key])


def test_bringup_pp1_on_cuda():
    cfg = BringupConfig(phase="pp1", tp=2, chunks=3, num_steps=2)
    res = run_bringup(cfg, device="cuda", echo=False)
    ref = reference_stream(cfg, build_model("tiny", seed=0, device="cuda"))
    for key, latent in res.controller.latents.items():
        _close(latent, ref[key], TP_TOL_BY_DTYPE["fp32"])


def test_pp_x_tp_on_cuda():
    plan = make_plan(2, 2, stage=Layout(tp=2), sampling=FOUR)
    res = run_step_split(plan, device="cuda", echo=False, timeout_s=300)
    model = build_model("tiny", seed=0, device="cuda")
    for r in plan.requests:
        _close(res.latents[r.request_id], generate(model, r, sampling=FOUR),
               TP_TOL_BY_DTYPE["fp32"])


def test_patch_vae_on_cuda(pool2):
    """The split decode on CUDA ranks: on one shared GPU every halo and gather is staged
    through host memory (gloo moves no CUDA tensor), with a GPU each they go over NCCL."""
    from ppdit.parallel.vae_patch.decode import PATCH_TOL
    from ppdit.parallel.vae_patch.run import PatchPlan, run_patch
    from ppdit.vae.streaming import decode_full

    latents = torch.randn(1, 16, 2, 8, 8, generator=torch.Generator().manual_seed(0))
    res = run_patch(PatchPlan((latents,), ranks=2), pool=pool2)
    full = decode_full(build_vae("tiny", seed=0), latents)
    _close(res.videos[(0, 1)], full, {k: max(v, GPU_TOL[k]) for k, v in PATCH_TOL.items()})


@pytest.fixture(scope="module")
def bf16_folder(tmp_path_factory):
    """A tiny folder stored in bf16, as Wan's releases are (its fp32-kept modules included)."""
    from ppdit.checkpoint.tiny import build_tiny_pipeline

    return build_tiny_pipeline(tmp_path_factory.mktemp("bf16"), seed=3, stored=torch.bfloat16)


@pytest.mark.parametrize("layout", ["ulysses=2,fsdp", "cfg=2,fsdp"])
def test_fsdp_from_a_bf16_folder_on_cuda(pool2, bf16_folder, layout):
    """tests/ranks/test_t2v.py's FSDP-from-bf16 check on CUDA ranks: with a GPU each (NCCL),
    equal to one GPU within ``BF16_TOL``, as on the CPU; ranks sharing one GPU are refused
    with the reason (FSDP gathers over the ranks' backend, and gloo moves no CUDA tensor)."""
    from dataclasses import replace

    from ppdit.t2v.generate import generate as generate_video
    from tests.support.pipelines import BF16_TOL, spec_for

    spec = spec_for(bf16_folder, layout, dtype="bf16", num_steps=2, height=48, width=64,
                    num_frames=9)
    if pool2.placement.staged:
        with pytest.raises(RankError, match="FSDP gathers weights"):
            generate_video(spec, pool=pool2, device="cuda")
        return
    reference = generate_video(replace(spec, layout=Layout()), device="cuda")
    got = generate_video(spec, pool=pool2, device="cuda")
    torch.testing.assert_close(got.latent, reference.latent, **BF16_TOL)
    torch.testing.assert_close(got.video, reference.video, **BF16_TOL)
