"""Wan's self-attention in pieces, for the attention processors ppdit writes itself.

Three layouts replace a block's self-attention (``attn1``) and nothing else: the causal chunk
generator (a KV cache: ``serve.causal``), Ulysses (all-to-alls around it: ``parallel.sequence``)
and the toy's block-causal training (a mask and a rope override: ``toy.models``). Each is
diffusers' ``WanAttnProcessor`` with one thing changed, so these pieces are its arithmetic, step
for step, and a processor built from them computes the same bits where it changes nothing::

    v = project_v(attn, h)                      (B, S, heads, hd)
    q, k = project_qk(attn, h, rope)            RMS norm over all heads, then rope
    out = attend(q, k, v, mask)                 scaled dot-product attention per head
    attention_out(attn, out, q)                 the output projection, back to (B, S, D)

``install`` routes every block's self-attention through a processor per layer;
``use_diffusers_attention`` puts diffusers' own back.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Wan's rotary embedding on (B, S, heads, hd), the arithmetic of diffusers' processor."""
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    cos, sin = cos[..., 0::2], sin[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out.type_as(x)


def project_v(attn, hidden_states: torch.Tensor) -> torch.Tensor:
    """Values (B, S, heads, hd): V needs its projection only (why V-first can start early)."""
    return attn.to_v(hidden_states).unflatten(2, (attn.heads, -1))


def project_qk(attn, hidden_states: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries and keys (B, S, heads, hd): projected, RMS-normed across all heads, rotated."""
    q = attn.norm_q(attn.to_q(hidden_states)).unflatten(2, (attn.heads, -1))
    k = attn.norm_k(attn.to_k(hidden_states)).unflatten(2, (attn.heads, -1))
    return apply_rope(q, *rope), apply_rope(k, *rope)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           mask: torch.Tensor | None = None) -> torch.Tensor:
    """Scaled dot-product attention of (B, S, heads, hd) tensors, per head; (B, S_q, heads,
    hd) out. ``mask`` (S_q, S_k) bool: True where a query may look."""
    q, k, v = (x.permute(0, 2, 1, 3) for x in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).permute(0, 2, 1, 3)


def attention_out(attn, out: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(B, S, heads, hd) -> (B, S, D) in ``like``'s dtype, through the output projection."""
    return attn.to_out[1](attn.to_out[0](out.flatten(2, 3).type_as(like)))


def install(model, processor_for: Callable[[int], object]) -> None:
    """Route block i's self-attention through ``processor_for(i)``."""
    for i, block in enumerate(model.blocks):
        block.attn1.set_processor(processor_for(i))


def use_diffusers_attention(model) -> None:
    """Every block's self-attention back to diffusers' own processor."""
    from diffusers.models.transformers.transformer_wan import WanAttnProcessor

    install(model, lambda i: WanAttnProcessor())
