"""Lab 05 gone wrong: the swaps are ppdit's own (``ppdit.parallel.sequence.comms``, whose
signatures match the stub's), unwrapped with ``.wait()``; only the attention is written. The
numbers and the bytes are right by construction: only the own-work rule can refuse it."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ppdit.parallel.sequence import comms


def seq_to_heads(x: torch.Tensor, split: Sequence[int], group, rank: int) -> torch.Tensor:
    return comms.seq_to_heads(x, split, group, rank).wait()


def heads_to_seq(y: torch.Tensor, split: Sequence[int], group, rank: int) -> torch.Tensor:
    return comms.heads_to_seq(y, split, group, rank)


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, split: Sequence[int],
                      group, rank: int) -> torch.Tensor:
    far = [seq_to_heads(t, split, group, rank).transpose(1, 2) for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*far)
    return heads_to_seq(out.transpose(1, 2).contiguous(), split, group, rank)
