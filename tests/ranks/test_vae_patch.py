"""Patch-parallel VAE decode on gloo ranks: the latent split by rows decodes to what one process
decodes (per frame and streamed, staged through host buffers or not), each rank holding about
its share of the memory; the row split and halo arithmetic without ranks are
tests/unit/test_vae_patch.py."""

from __future__ import annotations

import pytest
import torch

from ppdit.parallel.vae_patch.decode import PATCH_TOL
from ppdit.parallel.vae_patch.halo import split_rows
from ppdit.parallel.vae_patch.run import PatchPlan, one_process_decode, run_patches
from tests.support import vae_patch_workers

CHUNKS = (1, 2)  # 1: diffusers' per-frame loop (== decode_full); 2: streamed chunks


@pytest.fixture(scope="module")
def cases():
    g = torch.Generator().manual_seed(1)
    # 7 rows: 4 + 3 on 2 ranks, 3 + 2 + 2 on 3; 3 rows: 2 + 1 and 1 + 1 + 1 (halo = a whole rank)
    return [torch.randn(1, 16, 3, 7, 8, generator=g), torch.randn(1, 16, 2, 3, 5, generator=g)]


@pytest.fixture(scope="module")
def references(vae, cases):
    return [one_process_decode(vae, z) for z in cases]  # (video, peak bytes) per case


@pytest.fixture(scope="module")
def patch_run(pools, cases):
    """One launch of 3 ranks: every case and chunk size over all 3, and over a group of 2."""
    plans = {n: PatchPlan(tuple(cases), n, chunk_frames=CHUNKS, peaks=True) for n in (2, 3)}
    return run_patches(plans, timeout_s=300, pool=pools(3))


@pytest.mark.parametrize("n", [2, 3])
def test_patch_decode_equals_the_full_decode(patch_run, references, n):
    for i, (full, _) in enumerate(references):
        for k in CHUNKS:
            video = patch_run[n].videos[(i, k)]
            assert video.shape == full.shape
            err = (video - full).abs().max().item()
            print(f"{n} ranks, case {i}, chunk_frames={k}: max error {err:.2e}"
                  f"{' (bitwise)' if err == 0 else ''}")
            torch.testing.assert_close(video, full, **PATCH_TOL)
    assert patch_run[n].same_everywhere  # gather="all": every rank holds the same video


def test_each_rank_peaks_below_one_process(patch_run, references):
    one = references[0][1]
    for n in (2, 3):
        for rank, (p, rows) in enumerate(zip(patch_run[n].peaks, split_rows(7, n), strict=True)):
            print(f"{n} ranks, rank {rank} ({rows}/7 rows): peak {p.rows / one:.3f} of one "
                  f"process's, {p.gathered / one:.3f} with the video gathered on rank 0")
            assert p.gathered < one, (n, rank, p, one)
            # about its share of the rows: the halos and the whole latent add a little
            assert p.rows < one * (rows / 7 + 0.1), (n, rank, p, one)
        # 7 rows: a rank of 3 ranks holds at most 3 of them, one of 2 ranks 4
        assert max(p.rows for p in patch_run[3].peaks) < max(p.rows for p in patch_run[2].peaks)


def test_staged_patch_decode_equals_the_unstaged_bitwise(pools, vae, cases, references):
    """Ranks sharing a GPU talk over gloo, which moves only host memory: staged, every halo and
    gather travels as host copies (forced here on CPU ranks, where the copies are CPU to CPU).
    Same bytes, so the same video bit for bit; and the transport never got one of the decode's
    own tensors, which unstaged it gets in every exchange (so the spy sees staging vanish)."""
    runs = {stage: pools(2, stage=stage).run(vae_patch_workers.spied_patch_decode,
                                             args=(vae, cases[0]), timeout_s=300)
            for stage in (False, True)}
    unstaged = runs[False][0]["video"]
    torch.testing.assert_close(unstaged, references[0][0], **PATCH_TOL)
    for stage, per_rank in runs.items():
        for out in per_rank:
            assert out["staged"] == stage and torch.equal(out["video"], unstaged)
            assert out["own_on_wire"], "no exchange happened"
            assert all(n == 0 if stage else n > 0 for n in out["own_on_wire"]), out
