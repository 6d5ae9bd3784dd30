"""Lab 05 gone wrong: the right numbers the expensive way — every rank all-gathers every rank's
whole slice, then keeps its heads (and back: all-gathers every rank's heads, then keeps its
tokens). Each rank sends its whole slice to every other rank, P times the bytes of an
all-to-all, which sends each rank only the piece it needs."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F


def seq_to_heads(x: torch.Tensor, split: Sequence[int], group, rank: int) -> torch.Tensor:
    """(B, S_r, H, hd) my tokens, all heads -> (B, S, H/P, hd) all tokens, my heads."""
    b, s_r, h, hd = x.shape
    p, longest = len(split), max(split)
    padded = x.new_zeros(b, longest, h, hd)  # an all-gather wants equal pieces
    padded[:, :s_r] = x
    # the shortcut: everyone's whole slice, all heads, (B, P * longest, H, hd)
    every = funcol.wait_tensor(funcol.all_gather_tensor(padded, 1, group))
    tokens = torch.cat([every[:, j * longest:j * longest + n] for j, n in enumerate(split)], 1)
    hp = h // p
    return tokens[:, :, rank * hp:(rank + 1) * hp].contiguous()


def heads_to_seq(y: torch.Tensor, split: Sequence[int], group, rank: int) -> torch.Tensor:
    """(B, S, H/P, hd) all tokens, my heads -> (B, S_r, H, hd) my tokens, all heads."""
    start = sum(split[:rank])
    # the shortcut again: every rank's heads for every token, (B, S, H, hd), then my tokens
    every = funcol.wait_tensor(funcol.all_gather_tensor(y.contiguous(), 2, group))
    return every[:, start:start + split[rank]].contiguous()


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, split: Sequence[int],
                      group, rank: int) -> torch.Tensor:
    """Self-attention of my tokens against every token: (B, S_r, H, hd) -> (B, S_r, H, hd)."""
    far = [seq_to_heads(t, split, group, rank).transpose(1, 2) for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*far)  # (B, H/P, S, hd): my heads, every token
    return heads_to_seq(out.transpose(1, 2).contiguous(), split, group, rank)
