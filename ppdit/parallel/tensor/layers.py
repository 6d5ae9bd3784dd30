"""Megatron's tensor-parallel layers for Wan, and the three ways they can issue an all-reduce.

Megatron-LM (Shoeybi et al. 2019, https://arxiv.org/abs/1909.08053) splits each pair of linear
layers so that the pair needs **one** all-reduce. With the weight of ``y = x W^T`` stored as
(out_features, in_features) and ``tp`` ranks::

    column-parallel (split the OUTPUT features)      row-parallel (split the INPUT features)
    x (B,S,D) on every rank                          x_r (B,S,F/tp): rank r's column output
       | W_r = W[r*F/tp:(r+1)*F/tp, :]                  | W_r = W[:, r*F/tp:(r+1)*F/tp]
       v                                                v
    y_r (B,S,F/tp): a slice of y, no talk           partial_r = x_r W_r^T  (B,S,D), a SUM term
                                                        | all-reduce(sum) over the TP group
                                                        v
                                                     y = sum_r partial_r + b   (B,S,D), same
                                                         on every rank

A column layer feeds a row layer directly: each rank's slice is exactly what the next layer's
weight shard expects, and elementwise work in between (GELU; attention, independent per head)
runs on it. So Wan's attention (q, k, v column; out row) and its FFN (in column; out row) each
cost one all-reduce of (B, S, D). One twist: Wan RMS-normalizes q and k over the *whole* inner
dim (``qk_norm="rms_norm_across_heads"``), so ``DistributedRMSNorm`` all-reduces the per-token
sums of squares first.

How the all-reduce is issued (``collectives``; ``tensor.comms`` counts each one's graph breaks):

* ``"funcol"``: ``_functional_collectives.all_reduce`` returns a *new* tensor: eagerly an
  ``AsyncCollectiveTensor`` that waits at its first use; compiled, two graph nodes
  (``all_reduce``, ``wait_tensor``) Inductor may schedule around other work. No graph break.
* ``"c10d"``: ``dist.all_reduce(x)`` works in place. Dynamo swaps it for
  ``x.copy_(funcol.all_reduce(x))`` (``traceable_collective_remaps``), so it compiles into the
  same graph; eagerly it skips funcol's per-call wrapping (the cost pytorch issue #138773 measures).
* ``"c10d_async"``: ``dist.all_reduce(x, async_op=True).wait()``, the pattern for overlapping by
  hand: ``Work`` is an opaque C++ handle Dynamo cannot trace, so each one splits the graph.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F
from torch import nn

from ppdit.runtime.comm.wire import PLAIN, Wire
from ppdit.runtime.observe.trace import collective_tracer

COLLECTIVES = ("funcol", "c10d", "c10d_async")


def all_reduce_sum(x: torch.Tensor, group: dist.ProcessGroup, collectives: str,
                   wire: Wire = PLAIN) -> torch.Tensor:
    """Sum ``x`` over ``group`` and return the result, issued as one of ``COLLECTIVES`` on the
    rank's ``wire`` (staged there when ranks share a GPU over gloo).

    Inside ``collectives_into(tracer)`` an eager call records a ``collective`` span ending when
    the sum is there: funcol's wait moves into it from the next op that reads the result, so
    the step's arithmetic and order are unchanged."""
    if collectives not in COLLECTIVES:
        raise ValueError(f"collectives={collectives!r} is not one of {COLLECTIVES}")
    tracer = None if torch.compiler.is_compiling() else collective_tracer()
    if tracer is not None:  # eager, and a timeline asked: time it to its result (a wait)
        with tracer.span("collective", "all-reduce", gpu=True):
            out = wire.all_reduce(x, group, collectives)
            return funcol.wait_tensor(out) if collectives == "funcol" and not wire.staged else out
    return wire.all_reduce(x, group, collectives)


def _shard(t: torch.Tensor, dim: int, rank: int, tp: int) -> torch.Tensor:
    """Rank ``rank``'s contiguous 1/tp of ``t`` along ``dim`` (a copy: ``t`` can be freed)."""
    return t.chunk(tp, dim=dim)[rank].contiguous().clone()


class ColumnParallelLinear(nn.Module):
    """``y_r = x W_r^T + b_r``: this rank's 1/tp of the output features; needs no communication.
    Cut from the full ``nn.Linear`` every rank holds (same seed): rows and bias slice r."""

    def __init__(self, full: nn.Linear, *, rank: int, tp: int):
        super().__init__()
        self.in_features, self.out_features = full.in_features, full.out_features // tp
        self.weight = nn.Parameter(_shard(full.weight.data, 0, rank, tp), requires_grad=False)
        self.bias = (None if full.bias is None else
                     nn.Parameter(_shard(full.bias.data, 0, rank, tp), requires_grad=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)  # (..., out/tp)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out_local={self.out_features}, column-parallel"


class RowParallelLinear(nn.Module):
    """``y = all_reduce(x_r W_r^T) + b``: input features split, partial sums reduced. The bias is
    replicated and added *after* the all-reduce: before, it would be counted ``tp`` times."""

    def __init__(self, full: nn.Linear, *, rank: int, tp: int, group: dist.ProcessGroup,
                 collectives: str = "funcol", wire: Wire = PLAIN):
        super().__init__()
        if collectives not in COLLECTIVES:
            raise ValueError(f"collectives={collectives!r} is not one of {COLLECTIVES}")
        self.in_features, self.out_features = full.in_features // tp, full.out_features
        self.weight = nn.Parameter(_shard(full.weight.data, 1, rank, tp), requires_grad=False)
        self.bias = (None if full.bias is None else
                     nn.Parameter(full.bias.data.clone(), requires_grad=False))
        self.group, self.collectives, self.wire = group, collectives, wire

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        partial = F.linear(x, self.weight)  # (..., out): this rank's term of the sum
        out = all_reduce_sum(partial, self.group, self.collectives, self.wire)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return (f"in_local={self.in_features}, out={self.out_features}, row-parallel, "
                f"all-reduce via {self.collectives}")


class DistributedRMSNorm(nn.Module):
    """RMSNorm over a feature dim split across the TP group: ``x / sqrt(mean(x^2) + eps) * w``
    needs the mean over all D features, which one rank's slice does not give (one head may be
    loud, another quiet). But a mean is a sum over a count, and sums add across ranks::

        ss_r = sum_{i in my slice} x_i^2                  (B, S, 1) on each rank
        ss   = all_reduce_sum(ss_r)                       (B, S, 1), identical everywhere
        y_r  = x_r / sqrt(ss / D + eps) * w[my slice]     (B, S, D/tp)

    One scalar per token crosses the wire, against D/tp per token for the activations: four of
    these small all-reduces per block (q and k of both attentions) beside its three big ones."""

    def __init__(self, full: nn.RMSNorm, *, rank: int, tp: int, group: dist.ProcessGroup,
                 collectives: str = "funcol", wire: Wire = PLAIN):
        super().__init__()
        (self.full_dim,) = full.normalized_shape
        self.eps = full.eps if full.eps is not None else torch.finfo(torch.float32).eps
        self.weight = (None if full.weight is None else
                       nn.Parameter(_shard(full.weight.data, 0, rank, tp), requires_grad=False))
        self.group, self.collectives, self.wire = group, collectives, wire

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()  # like torch's rms_norm: accumulate in fp32 even for bf16 activations
        ss = xf.pow(2).sum(dim=-1, keepdim=True)  # (..., 1) local sum of squares
        ss = all_reduce_sum(ss, self.group, self.collectives, self.wire)
        y = xf * torch.rsqrt(ss / self.full_dim + self.eps)
        if self.weight is not None:
            y = y * self.weight
        return y.type_as(x)

    def extra_repr(self) -> str:
        local = self.weight.numel() if self.weight is not None else "?"
        return f"full_dim={self.full_dim}, local={local}, eps={self.eps}, across TP ranks"


def split_rms_norm(x: torch.Tensor, norm: nn.RMSNorm, tp: int, *, exchange: bool = True
                   ) -> torch.Tensor:
    """``tp`` ranks' RMSNorm of ``x`` (..., D), simulated in one process, concatenated: with
    ``exchange`` the slices' sums of squares are added first (``DistributedRMSNorm``'s
    all-reduce); without, each slice uses its own RMS, a per-rank ``nn.RMSNorm``'s mistake."""
    xs, ws = x.float().chunk(tp, dim=-1), norm.weight.chunk(tp)
    sums = [xi.pow(2).sum(dim=-1, keepdim=True) for xi in xs]  # (..., 1) per rank
    dim = x.shape[-1]
    if exchange:
        total = torch.stack(sums).sum(dim=0)
        scales = [torch.rsqrt(total / dim + norm.eps)] * tp
    else:
        scales = [torch.rsqrt(si / (dim // tp) + norm.eps) for si in sums]
    return torch.cat([xi * si * wi for xi, si, wi in zip(xs, scales, ws, strict=True)], dim=-1)
