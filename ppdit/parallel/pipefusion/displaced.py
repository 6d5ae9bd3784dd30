"""Self-attention over displaced patches: one block's K/V buffer, refreshed a patch at a time.

::

    step t, patch m:  K/V buffer  [ p0 (t) | ... | p(m-1) (t) | pm (t) | p(m+1) (t-1) | ... ]
                      queries of pm attend to all of it; pm's rows are written first

At step 0 without a warm-up the rows after the patch were never written: the patch attends to
the rows written so far. A whole-sequence micro-batch (a warm-up step) writes every row and
attends exactly as diffusers' processor does (``ppdit.attention``'s pieces: the same bits).
"""

from __future__ import annotations

import torch

from ppdit.attention import attend, attention_out, project_qk, project_v


class Cursor:
    """Which tokens of the step the running micro-batch holds (set per task by the stage)."""

    def __init__(self) -> None:
        self.patch = slice(0, 0)
        self.tokens = 0  # the whole sequence's length


class DisplacedAttention:
    """One block's self-attention processor with its K/V buffer (batch, S, heads, head_dim)."""

    def __init__(self, cursor: Cursor):
        self.cursor = cursor
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.filled = 0  # rows written at least once

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None,
                 rotary_emb=None):
        q, k = project_qk(attn, hidden_states, rotary_emb)
        v = project_v(attn, hidden_states)
        part, n = self.cursor.patch, self.cursor.tokens
        if self.k is None or self.k.shape[0] != k.shape[0]:
            shape = (k.shape[0], n, *k.shape[2:])
            self.k, self.v, self.filled = k.new_zeros(shape), v.new_zeros(shape), 0
        self.k[:, part], self.v[:, part] = k, v
        self.filled = max(self.filled, part.stop)
        out = attend(q, self.k[:, :self.filled], self.v[:, :self.filled])
        return attention_out(attn, out, q)


def install_displaced(model, blocks) -> Cursor:
    """Route the self-attention of ``blocks`` (this stage's) through fresh displaced
    processors sharing one cursor; returns the cursor."""
    cursor = Cursor()
    for i in blocks:
        model.blocks[i].attn1.set_processor(DisplacedAttention(cursor))
    return cursor
