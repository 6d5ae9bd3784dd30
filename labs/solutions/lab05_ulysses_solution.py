"""Reference solution of lab 05 (ppdit's own version, with V-first overlap and staging, is
``ppdit.parallel.sequence.comms``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F


def seq_to_heads(x: torch.Tensor, split: Sequence[int], group, rank: int) -> torch.Tensor:
    """(B, S_r, H, hd) my tokens, all heads -> (B, S, H/P, hd) all tokens, my heads."""
    b, s_r, h, hd = x.shape
    p = len(split)
    # piece j = my tokens x rank j's heads, as rows of dim 0: (P * S_r, B, H/P, hd)
    pieces = x.reshape(b, s_r, p, h // p, hd).permute(2, 1, 0, 3, 4).reshape(p * s_r, b,
                                                                           h // p, hd)
    # I send S_r rows to every rank and receive split[j] rows (rank j's tokens) from rank j:
    # stacked in rank order they are all S tokens, in order.
    rows = funcol.wait_tensor(funcol.all_to_all_single(pieces.contiguous(), list(split),
                                                       [s_r] * p, group))
    return rows.permute(1, 0, 2, 3)  # (S, B, H/P, hd) -> (B, S, H/P, hd)


def heads_to_seq(y: torch.Tensor, split: Sequence[int], group, rank: int) -> torch.Tensor:
    """(B, S, H/P, hd) all tokens, my heads -> (B, S_r, H, hd) my tokens, all heads."""
    b, _, hp, hd = y.shape
    p, s_r = len(split), split[rank]
    rows = y.permute(1, 0, 2, 3).contiguous()  # (S, B, H/P, hd): piece j = rank j's tokens
    back = funcol.wait_tensor(funcol.all_to_all_single(rows, [s_r] * p, list(split), group))
    # (P * S_r, B, H/P, hd): piece j = my tokens x rank j's heads; heads of rank j come j-th
    return back.view(p, s_r, b, hp, hd).permute(2, 1, 0, 3, 4).reshape(b, s_r, p * hp, hd)


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, split: Sequence[int],
                      group, rank: int) -> torch.Tensor:
    """Self-attention of my tokens against every token: (B, S_r, H, hd) -> (B, S_r, H, hd)."""
    far = [seq_to_heads(t, split, group, rank).transpose(1, 2) for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*far)  # (B, H/P, S, hd): my heads, every token
    return heads_to_seq(out.transpose(1, 2).contiguous(), split, group, rank)
