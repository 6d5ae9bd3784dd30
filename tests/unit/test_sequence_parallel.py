"""Sequence parallelism without ranks: the even token split, the head-count rule, the all-to-all
bytes by hand, ring attention's merge (equal to one device on ranks: tests/ranks/)."""

from __future__ import annotations

import pytest
import torch

from ppdit.model import build_model
from ppdit.parallel.layout import Layout, check_model, check_sp_degree
from ppdit.parallel.sequence.comms import a2a_bytes_per_layer, even_split, head_split
from ppdit.parallel.sequence.ring import RING_TOL
from ppdit.presets import get_preset


def test_uneven_split_gives_every_token_exactly_once():
    assert even_split(320, 3) == (107, 107, 106)
    assert sum(even_split(5 * 7 * 9, 4)) == 315


def test_heads_split_whole_and_any_degree_runs():
    assert head_split(12, 8) == (2, 2, 2, 2, 1, 1, 1, 1) and head_split(4, 6)[-1] == 0
    check_sp_degree(4, 2)
    with pytest.raises(ValueError, match="degree 3 must divide the 4 attention heads"):
        check_sp_degree(4, 3)  # V-Major's and the two-phase all-to-all's rule only
    check_model(Layout(ulysses=3), get_preset("tiny"), num_steps=2, latent_shape=(1, 16, 3, 8, 8))


def test_bytes_formula_with_uneven_heads_by_hand():
    # 3 ranks, 4 heads of 16 (rank 0: 2 heads), 315 tokens (rank 0: 105), fp32: Q, K, V send
    # rank 0's 105 tokens x the 2 other heads; the output its 2 heads x the 210 other tokens.
    assert a2a_bytes_per_layer(batch=1, tokens=315, dim=64, degree=3, bytes_per_element=4,
                               heads=4) == (3 * 105 * 2 + 210 * 2) * 16 * 4
    assert a2a_bytes_per_layer(batch=1, tokens=320, dim=64, degree=2, bytes_per_element=4,
                               heads=4) == a2a_bytes_per_layer(batch=1, tokens=320, dim=64,
                                                               degree=2, bytes_per_element=4)


def test_bytes_formula_by_hand():
    # 2 ranks, 320 tokens of width 64 in fp32: each all-to-all keeps half of a 160 x 64 slice
    # and sends the other half (20,480 bytes); four of them per layer.
    assert a2a_bytes_per_layer(batch=1, tokens=320, dim=64, degree=2, bytes_per_element=4) \
        == 4 * 160 * 64 * 4 // 2
    assert build_model("tiny", device="meta").config.num_attention_heads == 4


def test_ring_merge_equals_full_attention_block_by_block():
    """The log-sum-exp merge of K/V blocks, in any order, equals attention over all keys."""
    from ppdit.attention import attend
    from ppdit.parallel.sequence.ring import attend_with_lse, merge

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 45, 4, 16, generator=g) for _ in range(3))
    full = attend(q, k, v)
    for cuts in ([45], [20, 25], [11, 11, 11, 12]):
        starts = [sum(cuts[:i]) for i in range(len(cuts))]
        out = lse = None
        for s, c in reversed(list(zip(starts, cuts, strict=True))):  # another order than 0..P-1
            block = attend_with_lse(q, k[:, s:s + c], v[:, s:s + c])
            out, lse = block if out is None else merge(out, lse, *block)
        torch.testing.assert_close(out, full, **RING_TOL)


@pytest.mark.parametrize("s_q, s_k", [(45, 45), (45, 37), (7, 64)])
def test_attend_with_lse_equals_softmax_attention(s_q, s_k):
    """The CPU flash kernel's output and log-sum-exp equal the textbook arithmetic's, for
    blocks of other lengths than the queries' (a ring's uneven split)."""
    from ppdit.parallel.sequence.ring import attend_with_lse
    from tests.support.ring import softmax_attention

    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, s_q, 4, 16, generator=g)
    k, v = (torch.randn(2, s_k, 4, 16, generator=g) for _ in range(2))
    out, lse = attend_with_lse(q, k, v)
    ref_out, ref_lse = softmax_attention(q, k, v)
    assert out.dtype == lse.dtype == torch.float32 and lse.shape == (2, 4, s_q)
    torch.testing.assert_close(out, ref_out, **RING_TOL)
    torch.testing.assert_close(lse, ref_lse, **RING_TOL)
