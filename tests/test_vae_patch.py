"""Patch-parallel VAE decode: the latent split by rows over gloo ranks decodes to what one process
decodes (per frame and streamed), each rank holding about its share of the memory; the halo
arithmetic and the rules checked without ranks."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ppdit.parallel.partition import to_ranges
from ppdit.parallel.vae_patch.decode import (
    PATCH_TOL,
    PatchStreamingDecoder,
    check_decoder,
    patch_decoder,
)
from ppdit.parallel.vae_patch.halo import RowGroup, edge_rows, place_halos, split_rows
from ppdit.parallel.vae_patch.run import PatchPlan, one_process_decode, run_patches
from ppdit.vae.presets import build_vae

CHUNKS = (1, 2)  # 1: diffusers' per-frame loop (== decode_full); 2: streamed chunks


@pytest.fixture(scope="module")
def vae():
    torch.set_num_threads(1)  # as each rank runs: the same kernels
    return build_vae("tiny", seed=0)


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


# -- with ranks ---------------------------------------------------------------------------------


@pytest.mark.slow
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


@pytest.mark.slow
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


# -- without ranks ------------------------------------------------------------------------------


def test_split_rows_is_even_and_refuses_too_many_ranks():
    assert split_rows(7, 2) == (4, 3)
    assert split_rows(7, 3) == (3, 2, 2)
    assert split_rows(3, 3) == (1, 1, 1)
    with pytest.raises(ValueError, match="height=3 latent rows cannot be split over 4 ranks"):
        split_rows(3, 4)
    with pytest.raises(ValueError, match="min_rows=2"):
        split_rows(5, 3, min_rows=2)


def test_too_many_ranks_is_refused_before_any_message(vae):
    four = RowGroup(rank=0, peers=(0, 1, 2, 3))  # no process group needed: it fails first
    with pytest.raises(ValueError, match="use at most 3 ranks"):
        PatchStreamingDecoder(vae, 3, rows=four)


def test_halo_rows_are_the_neighbours_rows_and_the_conv_matches(vae):
    """Simulated exchange: each part's padded rows equal the full padded tensor's rows there,
    and the convolution over the parts, stacked, equals the full convolution."""
    conv = vae.decoder.conv_in  # WanCausalConv3d 3x3x3, padding (1, 1, 1, 1, 2, 0)
    x = torch.randn(1, 16, 2, 7, 8, generator=torch.Generator().manual_seed(2))
    full_padded = F.pad(x, conv._padding)
    split = split_rows(7, 3)
    parts = [F.pad(x[..., r, :], conv._padding) for r in to_ranges(split)]
    edges = [edge_rows(p, 1) for p in parts]  # (first, last) own rows of each part
    for i, p in enumerate(parts):
        upper = edges[i - 1][1] if i > 0 else None  # the rank above sends its last rows
        lower = edges[i + 1][0] if i + 1 < len(parts) else None
        place_halos(p, upper, lower, 1)
        start = sum(split[:i])
        assert torch.equal(p, full_padded[..., start:start + split[i] + 2, :]), i
    stacked = torch.cat([nn.Conv3d.forward(conv, p) for p in parts], dim=3)
    torch.testing.assert_close(stacked, conv(x), **PATCH_TOL)


def test_the_parallel_copy_leaves_the_vae_untouched(vae):
    before = [type(m) for m in vae.decoder.modules()]
    twin = patch_decoder(vae.decoder, RowGroup(rank=0, peers=(0, 1)), (4, 3))
    assert [type(m) for m in vae.decoder.modules()] == before
    assert twin.conv_in.inner.weight is vae.decoder.conv_in.weight  # shared, not copied
    assert type(twin.mid_block.attentions[0]).__name__ == "PatchAttention"


def test_a_norm_with_spatial_statistics_is_refused(vae):
    decoder = copy.deepcopy(vae.decoder)
    decoder.norm_out = nn.GroupNorm(2, 8)  # statistics over H x W: would need an all-reduce
    with pytest.raises(ValueError, match="norm_out .GroupNorm. is not known to be local"):
        check_decoder(decoder)
