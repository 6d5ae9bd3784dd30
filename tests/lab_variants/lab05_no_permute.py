"""Lab 05 gone wrong: the pieces cut straight from memory, without moving the rank axis first
— the right number of elements goes to each rank, but not the right heads and tokens."""

from __future__ import annotations

import torch
import torch.distributed._functional_collectives as funcol


def seq_to_heads(x: torch.Tensor, split, group, rank: int) -> torch.Tensor:
    b, s_r, h, hd = x.shape
    p = len(split)
    pieces = x.reshape(p * s_r, b, h // p, hd)  # the bug: no permute
    rows = funcol.wait_tensor(funcol.all_to_all_single(pieces.contiguous(), list(split),
                                                       [s_r] * p, group))
    return rows.permute(1, 0, 2, 3)


def heads_to_seq(y: torch.Tensor, split, group, rank: int) -> torch.Tensor:
    raise AssertionError("not reached: seq_to_heads is checked first")


def ulysses_attention(q, k, v, split, group, rank: int) -> torch.Tensor:
    raise AssertionError("not reached")
