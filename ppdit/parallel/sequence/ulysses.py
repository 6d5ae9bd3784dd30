"""Ulysses sequence parallelism for the Wan DiT: split the tokens, not the weights.

Every rank holds the whole model and a slice of the S tokens (any degree: it attends with its
share of the heads, ``comms.head_split``). All but self-attention works token by token (norms,
modulation, FFN, cross-attention against the text every rank has; even Wan's q/k RMSNorm
"across heads" is per token: no all-reduce, unlike TP), so it runs on the slice without talking.
Self-attention needs every token: it swaps layouts twice (``comms.py``), Q, K, V to a head
split, attention over all tokens for H_r heads, back.

V-first (CoCoDiff's scheduling): V needs only its projection, so its all-to-all is issued first
and waited for just before attention, hidden behind Q and K's norm and rope."""

from __future__ import annotations

from contextlib import ExitStack, nullcontext
from dataclasses import replace

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ppdit.attention import attend, attention_out, install, project_qk, project_v
from ppdit.model import project_out, prologue, run_blocks, unpatchify
from ppdit.parallel.layout import check_sp_degree
from ppdit.parallel.sequence.comms import (
    A2ACounter,
    head_chunks,
    head_split,
    heads_to_seq,
    seq_to_heads,
)
from ppdit.parallel.sequence.topology import Hierarchy
from ppdit.parallel.sequence.vmajor import VMajor, v_all_to_all
from ppdit.runtime.comm.wire import PLAIN, Wire
from ppdit.runtime.observe.trace import Tracer

# Each rank multiplies its token slice (fewer GEMM rows) and attends with its heads; the sums
# are the same per row, so on this project's CPU the result is even bitwise, but GEMM kernels
# may block rows differently on other machines: equality is promised to rounding.
SP_TOL = {"rtol": 1e-5, "atol": 1e-5}


class UlyssesAttnProcessor:
    """Self-attention on a token slice, through a head split and back."""

    def __init__(self, group, split: tuple[int, ...], rank: int, v_first: bool,
                 counter: A2ACounter, tracer: Tracer | None = None, wire: Wire = PLAIN,
                 hier: Hierarchy | None = None, vmajor: VMajor | None = None, layer: int = 0):
        self.group, self.split, self.rank, self.v_first = group, split, rank, v_first
        self.counter, self.tracer, self.wire, self.hier = counter, tracer, wire, hier
        self.vmajor, self.layer = vmajor, layer

    def _span(self, kind: str, name: str):
        return self.tracer.span(kind, name) if self.tracer is not None else nullcontext()

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None,
                 rotary_emb=None):
        a2a = dict(split=self.split, group=self.group, rank=self.rank, counter=self.counter,
                   wire=self.wire, hier=self.hier)
        in_flight = ExitStack()  # V's all-to-all, from issue to arrival: drawn beside the compute
        v_last = not self.v_first and self.vmajor is None
        if self.vmajor is not None:  # only V's changed rows travel (vmajor.py): no V-first
            with self._span("wait", "all-to-all v (V-Major)"):
                v_far = self._v_major(project_v(attn, hidden_states))
        elif self.v_first:  # issue V's all-to-all before any Q/K work
            with self._span("compute", "v"):
                v = project_v(attn, hidden_states)
            in_flight.enter_context(self._span("send", "all-to-all v, in flight"))
            v_far = seq_to_heads(v, **a2a)
        with self._span("compute", "q, k, v" if v_last else "q, k"):  # project, norm, rope
            q, k = project_qk(attn, hidden_states, rotary_emb)
            if v_last:
                v = project_v(attn, hidden_states)
        with self._span("wait", "all-to-all q, k, v"):
            q_far = seq_to_heads(q, **a2a).wait()
            k_far = seq_to_heads(k, **a2a).wait()
            if self.vmajor is None:  # V-Major's V is here already
                v_far = (v_far if self.v_first else seq_to_heads(v, **a2a)).wait()
            in_flight.close()
        with self._span("compute", "attention"):
            out = attend(q_far, k_far, v_far)
        with self._span("wait", "all-to-all out"):
            out = heads_to_seq(out.contiguous(), **a2a,
                               heads=head_split(q.shape[2], len(self.split)))
        return attention_out(attn, out, q)

    def _v_major(self, v: torch.Tensor) -> torch.Tensor:
        """V through the selective all-to-all: (B, S, H/P, hd), on V's device."""
        rows = v_all_to_all(self.wire.carry(head_chunks(v, len(self.split))), self.split,
                            self.rank, self.group, self.vmajor, self.layer)
        return rows.to(v.device).permute(1, 0, 2, 3)


def install_ulysses(model, group, split: tuple[int, ...], *, v_first: bool,
                    tracer: Tracer | None = None, wire: Wire = PLAIN,
                    hier: Hierarchy | None = None, vmajor: VMajor | None = None
                    ) -> A2ACounter:
    """Route every block's self-attention through Ulysses; returns the all-to-all counter.
    ``hier``: every all-to-all in two phases over nodes (``topology``); ``vmajor``: V's sends
    only the rows that changed (``vmajor``; one processor per block: copies are per layer).
    Any degree runs (``comms.head_split``); ``hier`` and ``vmajor`` cut even head chunks."""
    if hier is not None or vmajor is not None:
        check_sp_degree(model.config.num_attention_heads, len(split))
    counter = A2ACounter()
    rank = dist.get_rank(group)
    install(model, lambda i: UlyssesAttnProcessor(group, split, rank, v_first, counter, tracer,
                                                  wire, hier, vmajor, layer=i))
    return counter


def sp_forward(model, latent: torch.Tensor, timestep: torch.Tensor, text: torch.Tensor,
               group, split: tuple[int, ...], wire: Wire = PLAIN, cache=None) -> torch.Tensor:
    """The velocity (B, C, F, H, W) with the blocks run on this rank's token slice; every rank
    returns the whole result (the slices are gathered before unpatchify). ``cache``: a
    ``cache.BlockCache`` deciding over the sequence ranks."""
    rank = dist.get_rank(group)
    latent, text = latent.to(model.dtype), text.to(model.dtype)  # as model_forward does
    start = sum(split[:rank])
    mine = slice(start, start + split[rank])
    hidden, ctx = prologue(model, latent, timestep, text, mine)  # patchify: cheap, everywhere
    cos, sin = ctx.rotary_emb
    local = replace(ctx, rotary_emb=(cos[:, mine], sin[:, mine]))  # my tokens' positions
    run = run_blocks if cache is None else cache.run
    tokens = project_out(model, run(model, hidden[:, mine].contiguous(), local), local)
    return unpatchify(model, gather_tokens(tokens, split, group, wire), ctx.grid)


def gather_tokens(tokens: torch.Tensor, split: tuple[int, ...], group,
                  wire: Wire = PLAIN) -> torch.Tensor:
    """All ranks' (B, S_r, C') slices -> (B, S, C') everywhere (padded to the longest slice)."""
    pad = max(split) - tokens.shape[1]
    every = wire.all_gather(F.pad(tokens, (0, 0, 0, pad)) if pad else tokens, group)
    parts = every.chunk(len(split))
    return torch.cat([p[:, :n] for p, n in zip(parts, split, strict=True)], dim=1)
