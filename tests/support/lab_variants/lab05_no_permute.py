"""Lab 05 gone wrong: the pieces cut straight from memory, without moving the rank axis first
— the right number of elements goes to each rank, but not the right heads and tokens."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed._functional_collectives as funcol

from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab05_ulysses_solution.py")
heads_to_seq, ulysses_attention = _solution.heads_to_seq, _solution.ulysses_attention


def seq_to_heads(x: torch.Tensor, split, group, rank: int) -> torch.Tensor:
    b, s_r, h, hd = x.shape
    p = len(split)
    pieces = x.reshape(p * s_r, b, h // p, hd)  # the bug: no permute
    rows = funcol.wait_tensor(funcol.all_to_all_single(pieces.contiguous(), list(split),
                                                       [s_r] * p, group))
    return rows.permute(1, 0, 2, 3)
