"""Patch-parallel VAE decode without ranks: the row split, the halo arithmetic, the parallel
copy of the decoder and the rules it checks. The decode on gloo ranks (equal to one process's,
each rank holding its share of the memory) is tests/ranks/test_vae_patch.py."""

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
