"""Ring attention: sequence parallelism that shards the attention itself, for any head count.

Ulysses trades the token split for a head split, so its degree must divide the heads (Wan 1.3B
has 12: no 8-way Ulysses). Ring attention keeps the token split: queries stay put while the
key/value blocks travel around the ring, one hop a step, each folded into the running output
with FlashAttention's online-softmax (log-sum-exp) merge::

    lse  = logaddexp(lse_a, lse_b)
    out  = out_a * exp(lse_a - lse) + out_b * exp(lse_b - lse)

After P - 1 hops every query has met every key once. The next hop is posted before the current
block's attention runs, so transfer overlaps compute; a hop is one fused send + receive
(``Wire.batch``), which NCCL launches as a group, so it cannot block itself. Not bitwise: each
rank merges in its own order, rescaling partial sums; ``RING_TOL`` bounds the error.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ppdit.attention import attention_out, install, project_qk, project_v
from ppdit.runtime.comm.wire import DEFAULT_TIMEOUT_S, Wire, wait_for
from ppdit.runtime.observe.trace import Tracer

# The merge reorders and rescales the softmax sums; on the tiny model over 2 steps the error
# seen is ~1e-7 on values of order 1, so 1e-5 leaves two orders of margin (as SP_TOL).
RING_TOL = {"rtol": 1e-5, "atol": 1e-5}


def attend_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of (B, S_q, H, hd) queries over one (B, S_k, H, hd) block: the output
    (B, S_q, H, hd) in fp32 and the log-sum-exp (B, H, S_q) the merge needs, which
    ``F.scaled_dot_product_attention`` does not return: a fused kernel that does is called directly.
    None forms the S_q x S_k scores (in fp32, 39 GB per call for Wan 1.3B at ring 2 at 480p:
    ``memory_model.ring_attention_peak_bytes``). CPU: PyTorch's CPU flash kernel. CUDA, bf16 /
    fp16: FlashAttention-2. CUDA, fp32 (which flash does not take): the memory-efficient kernel,
    whose log-sum-exp is padded to a multiple of 32 queries (sliced back here)."""
    qh, kh, vh = (x.permute(0, 2, 1, 3) for x in (q, k, v))  # (B, H, S, hd) views
    aten = torch.ops.aten
    if q.device.type == "cpu":
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(qh, kh, vh)[:2]
    elif q.dtype in (torch.bfloat16, torch.float16):
        out, lse = aten._scaled_dot_product_flash_attention(qh, kh, vh)[:2]
    else:
        out, lse = aten._scaled_dot_product_efficient_attention(qh, kh, vh, None, True)[:2]
    return out.permute(0, 2, 1, 3).float(), lse[..., :q.shape[1]].float()


def merge(out: torch.Tensor, lse: torch.Tensor, block_out: torch.Tensor,
          block_lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Fold one block's (output, log-sum-exp) into the running pair (all fp32)."""
    new = torch.logaddexp(lse, block_lse)
    old_w = torch.exp(lse - new).transpose(1, 2).unsqueeze(-1)  # (B, S, H, 1)
    block_w = torch.exp(block_lse - new).transpose(1, 2).unsqueeze(-1)
    return out * old_w + block_out * block_w, new


@dataclass
class Ring:
    """Who this rank's neighbours are and how blocks travel (one per install)."""

    group: object  # the SP process group (None: the world)
    split: tuple[int, ...]  # tokens per rank, in rank order
    rank: int  # this rank's index in the group
    wire: Wire = field(default_factory=Wire)  # how blocks travel (host memory when staged)
    tracer: Tracer | None = None
    bytes_sent: int = 0  # K/V bytes this rank sent on

    def global_rank(self, r: int) -> int:
        return r if self.group is None else dist.get_global_rank(self.group, r)

    def span(self, kind: str, name: str):
        return self.tracer.span(kind, name) if self.tracer is not None else nullcontext()


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ring: Ring
                   ) -> torch.Tensor:
    """Attention of this rank's queries over every rank's keys and values (fp32 out)."""
    p = len(ring.split)
    kv = torch.stack((k, v)).contiguous()  # one message per hop
    out = lse = None
    for step in range(p):
        hop = _post_hop(kv, step, ring) if step < p - 1 else None
        with ring.span("compute", f"attention, block of rank {(ring.rank - step) % p}"):
            block = attend_with_lse(q, kv[0], kv[1])
            out, lse = block if out is None else merge(out, lse, *block)
        if hop is not None:
            kv = _wait_hop(hop, kv.device, ring)
    return out


def _post_hop(kv: torch.Tensor, step: int, ring: Ring):
    """Send the block in hand to the next rank and receive the previous rank's, fused."""
    p = len(ring.split)
    nxt, prv = (ring.rank + 1) % p, (ring.rank - 1) % p
    source = (ring.rank - step - 1) % p  # whose tokens arrive in this hop
    shape = (*kv.shape[:2], ring.split[source], *kv.shape[3:])
    outgoing = kv.to(ring.wire.buffers)
    incoming = torch.empty(shape, dtype=kv.dtype, device=ring.wire.buffers)
    works = ring.wire.batch([("send", outgoing, ring.global_rank(nxt)),
                             ("recv", incoming, ring.global_rank(prv))], ring.group)
    ring.bytes_sent += outgoing.numel() * outgoing.element_size()
    return works, outgoing, incoming, prv


def _wait_hop(hop, device: torch.device, ring: Ring) -> torch.Tensor:
    works, _outgoing, incoming, prv = hop  # the send's tensor is kept alive until here
    with ring.span("wait", "K/V block"):
        for work in works:
            wait_for(work, DEFAULT_TIMEOUT_S, f"ring attention: the K/V block from rank {prv}")
    return incoming.to(device)


class RingAttnProcessor:
    """Wan's self-attention on a token slice, keys and values passed around the ring."""

    def __init__(self, ring: Ring):
        self.ring = ring

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None,
                 rotary_emb=None):
        with self.ring.span("compute", "q, k, v"):  # project, norm, rope
            q, k = project_qk(attn, hidden_states, rotary_emb)
            v = project_v(attn, hidden_states)
        return attention_out(attn, self.attend(q, k, v), q)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """This rank's queries over every rank's keys and values (USP wraps it: usp.py)."""
        return ring_attention(q, k, v, self.ring)


def install_ring(model, group, split: tuple[int, ...], wire: Wire, *,
                 tracer: Tracer | None = None) -> Ring:
    """Route every block's self-attention through ring attention (any head count): the ring."""
    rank = dist.get_rank(group) if group is not None else dist.get_rank()
    ring = Ring(group, tuple(split), rank, wire, tracer)
    install(model, lambda i: RingAttnProcessor(ring))
    return ring
