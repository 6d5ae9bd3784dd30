"""Lab 05 gone wrong, hidden from a reading of the file: ppdit's swaps fetched at run time by
unpickling a reference to them (``pickle`` imports the module it names), so no import statement
and no name like ``importlib`` shows. The checker guards the functions each rank runs: any call
into ppdit's code from them is refused, however it was reached."""

from __future__ import annotations

import pickle
from collections.abc import Sequence

import torch
import torch.nn.functional as F


def _ppdit(name: str):
    return pickle.loads(b"cppdit.parallel.sequence.comms\n" + name.encode() + b"\n.")


def seq_to_heads(x: torch.Tensor, split: Sequence[int], group, rank: int) -> torch.Tensor:
    return _ppdit("seq_to_heads")(x, split, group, rank).wait()


def heads_to_seq(y: torch.Tensor, split: Sequence[int], group, rank: int) -> torch.Tensor:
    return _ppdit("heads_to_seq")(y, split, group, rank)


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, split: Sequence[int],
                      group, rank: int) -> torch.Tensor:
    far = [seq_to_heads(t, split, group, rank).transpose(1, 2) for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*far)
    return heads_to_seq(out.transpose(1, 2).contiguous(), split, group, rank)
