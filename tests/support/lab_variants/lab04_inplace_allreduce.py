"""Lab 04 gone wrong: the partial sums reduced in place with c10d's ``dist.all_reduce``.

Eagerly this is right. Under ``torch.compile`` Dynamo rewrites it to a functional all-reduce
plus a ``copy_`` back into ``partial``; the checker rejects that copy with a message."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F


def shard(w1, b1, w2, rank: int, world: int):
    rows = slice(rank * w1.shape[0] // world, (rank + 1) * w1.shape[0] // world)
    return w1[rows].contiguous(), b1[rows].contiguous(), w2[:, rows].contiguous()


def tp_mlp(x: torch.Tensor, w1_r, b1_r, w2_r, b2, group) -> torch.Tensor:
    partial = F.linear(F.gelu(F.linear(x, w1_r, b1_r), approximate="tanh"), w2_r)
    dist.all_reduce(partial, group=group)  # in place, c10d
    return partial + b2
