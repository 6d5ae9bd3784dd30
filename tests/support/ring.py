"""What the CPU and GPU tests of ring attention share: the plain softmax attention it must equal,
and a loopback wire that lets one process run the real ``ring_attention`` loop (its hops, its
buffers) without a second rank, so its peak memory can be measured against the model."""

from __future__ import annotations

import torch

from ppdit.parallel.sequence.ring import Ring


def softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """The textbook arithmetic in fp32, S_q x S_k scores and all: (B, S_q, H, hd) out and the
    (B, H, S_q) log-sum-exp, what ``attend_with_lse`` returns without forming the scores."""
    qh, kh, vh = (x.float().permute(0, 2, 1, 3) for x in (q, k, v))  # (B, H, S, hd)
    scores = qh @ kh.transpose(-1, -2) * q.shape[-1] ** -0.5  # (B, H, S_q, S_k)
    lse = torch.logsumexp(scores, dim=-1)
    return (torch.softmax(scores, dim=-1) @ vh).permute(0, 2, 1, 3), lse


class _Done:
    def wait(self, timeout=None) -> bool:
        return True


class LoopbackWire:
    """Each hop "receives" the block this rank sends: wrong tokens, the same buffers (an
    incoming block allocated per hop, the sent one kept until the wait) as on a real ring."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.buffers = torch.device(device)

    def batch(self, ops, group=None) -> list:
        (_, sent, _), (_, received, _) = ops
        received.copy_(sent)
        return [_Done()]


def loopback_ring(degree: int, tokens: int, device: torch.device | str = "cpu") -> Ring:
    """Rank 0 of a ring of ``degree`` ranks of ``tokens`` tokens each, hops looped back."""
    return Ring(None, (tokens,) * degree, 0, LoopbackWire(device))
