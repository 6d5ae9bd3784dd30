"""Lab 05: the two all-to-alls of Ulysses sequence parallelism (see README.md)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F


def seq_to_heads(x: torch.Tensor, split: Sequence[int], group, rank: int) -> torch.Tensor:
    """(B, S_r, H, hd) my tokens, all heads -> (B, S, H/P, hd) all tokens, my heads."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 05: tokens to heads")
    # END YOUR SOLUTION


def heads_to_seq(y: torch.Tensor, split: Sequence[int], group, rank: int) -> torch.Tensor:
    """(B, S, H/P, hd) all tokens, my heads -> (B, S_r, H, hd) my tokens, all heads."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 05: heads back to tokens")
    # END YOUR SOLUTION


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, split: Sequence[int],
                      group, rank: int) -> torch.Tensor:
    """Self-attention of my tokens against every token: (B, S_r, H, hd) -> (B, S_r, H, hd)."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 05: swap, attend, swap back")
    # END YOUR SOLUTION


__all__ = ["F", "funcol", "heads_to_seq", "seq_to_heads", "ulysses_attention"]
