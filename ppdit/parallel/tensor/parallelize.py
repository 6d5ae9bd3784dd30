"""Tensor parallelism for Wan: every block's attention heads and FFN columns split over a group.

``parallelize_wan(model, tp_group=g)`` rewrites each ``WanTransformerBlock`` in place::

    block (replicated h (B,S,D) in, replicated h out)
      norm1, modulation ........................... replicated (cheap, every rank does it)
      attn1  to_q, to_k, to_v   column-parallel     heads [r*H/tp, (r+1)*H/tp) on rank r
             norm_q, norm_k     DistributedRMSNorm  all-reduce (B,S,1) each
             SDPA over my heads                     no talk: heads are independent
             to_out[0]          row-parallel        all-reduce (B,S,D)
      norm2                     replicated
      attn2  to_q               column-parallel     (image tokens h)
             to_k, to_v         column-parallel     (text tokens, (B,L,D))
             norm_q, norm_k     DistributedRMSNorm  all-reduce (B,S,1) and (B,L,1)
             add_k_proj, add_v_proj, norm_added_k   as to_k, to_v, norm_k (Wan 2.1 I2V's
                                CLIP tokens: each rank projects all of them for its heads)
             to_out[0]          row-parallel        all-reduce (B,S,D)
      norm3, modulation         replicated
      ffn    net[0].proj        column-parallel     F/tp hidden features, GELU on the slice
             net[2]             row-parallel        all-reduce (B,S,D)

Everything outside the blocks (patch embedding, condition embedder, output head) stays
replicated: a few percent of the work, and it keeps every rank's ``h`` identical, so diffusers'
block code runs unchanged around the swapped-in layers (its attention processor only needs
``attn.heads``). The single-device model code is not touched (torchtitan's rule: parallelize
from outside), and the group is an argument: a PP x TP mesh passes each stage its own.
"""

from __future__ import annotations

import torch.distributed as dist
from diffusers import WanTransformer3DModel
from torch import nn

from ppdit.parallel.layout import check_tp_degree
from ppdit.parallel.tensor.layers import (
    COLLECTIVES,
    ColumnParallelLinear,
    DistributedRMSNorm,
    RowParallelLinear,
)
from ppdit.runtime.comm.wire import PLAIN, Wire

# Why TP output is close to, not bitwise equal to, one device: a row-parallel layer computes
# sum_r (x_r W_r^T) with one GEMM per rank and adds the tp partial sums in the all-reduce, and
# the distributed RMSNorm adds tp partial sums of squares; one device accumulates the same
# products inside one GEMM / one reduction, in another order. Float addition is not
# associative, so results differ by rounding. Seen on the tiny preset in fp32 (outputs of size
# ~3): at most 7e-7 for TP = 2 and 4, eager and compiled (Inductor reorders too), and over 4
# Euler steps of PP x TP. The tolerance leaves two orders of magnitude for other hardware and
# reduction algorithms (NCCL picks ring or tree by message size).
TP_TOL = {"rtol": 1e-4, "atol": 1e-4}
# In bf16 / fp16 every activation is rounded to 8 / 11 significant bits after each op, so two
# summation orders diverge by a few units in the last place of values of size ~1 and more
# after 4 blocks: bf16's unit roundoff is 2^-8 = 3.9e-3, fp16's 2^-11 = 4.9e-4. The bounds
# below allow ~5 such units (the torchtitan-style named tolerance for reduced precision).
TP_TOL_BY_DTYPE = {"fp32": TP_TOL, "bf16": {"rtol": 2e-2, "atol": 2e-2},
                   "fp16": {"rtol": 3e-3, "atol": 3e-3}}


def parallelize_wan(model: WanTransformer3DModel, *, tp_group: dist.ProcessGroup,
                    collectives: str = "funcol", wire: Wire = PLAIN) -> WanTransformer3DModel:
    """Shard every block of ``model`` over ``tp_group`` (Megatron column/row split) in place,
    and return it (unchanged by a group of one rank). Every rank must hold the same full
    weights before (one seed); after, each keeps only its shards. ``collectives``: how the
    all-reduces are issued (``layers.py``); ``wire``: the rank's (it stages them on host copies
    when ranks share a GPU over gloo)."""
    if collectives not in COLLECTIVES:
        raise ValueError(f"collectives={collectives!r} is not one of {COLLECTIVES}")
    tp, rank = dist.get_world_size(tp_group), dist.get_rank(tp_group)
    check_tp_degree(model.config, tp)
    if tp == 1:
        return model
    _check_plain_wan(model)
    kw = dict(rank=rank, tp=tp)
    red = dict(kw, group=tp_group, collectives=collectives, wire=wire)
    for block in model.blocks:
        for attn in (block.attn1, block.attn2):
            attn.to_q = ColumnParallelLinear(attn.to_q, **kw)
            attn.to_k = ColumnParallelLinear(attn.to_k, **kw)
            attn.to_v = ColumnParallelLinear(attn.to_v, **kw)
            attn.norm_q = DistributedRMSNorm(attn.norm_q, **red)
            attn.norm_k = DistributedRMSNorm(attn.norm_k, **red)
            attn.to_out[0] = RowParallelLinear(attn.to_out[0], **red)
            if attn.add_k_proj is not None:  # Wan 2.1 I2V: the image's keys and values
                attn.add_k_proj = ColumnParallelLinear(attn.add_k_proj, **kw)
                attn.add_v_proj = ColumnParallelLinear(attn.add_v_proj, **kw)
                attn.norm_added_k = DistributedRMSNorm(attn.norm_added_k, **red)
            _localize_heads(attn, tp)
        block.ffn.net[0].proj = ColumnParallelLinear(block.ffn.net[0].proj, **kw)
        block.ffn.net[2] = RowParallelLinear(block.ffn.net[2], **red)
    return model


def _localize_heads(attn: nn.Module, tp: int) -> None:
    """Tell diffusers' processor how many heads this rank holds: it unflattens by ``heads``."""
    attn.heads //= tp
    attn.inner_dim //= tp
    attn.kv_inner_dim //= tp


def _check_plain_wan(model: WanTransformer3DModel) -> None:
    """The split assumes an unsharded Wan with separate q/k/v projections."""
    swapped = [m for b in model.blocks for m in (b.attn1.to_q, b.ffn.net[2])
               if type(m) is not nn.Linear]
    if swapped or any(hasattr(p, "placements") for p in model.parameters()):  # DTensor params
        raise ValueError("the model is already tensor-parallel (sharded layers or DTensor "
                         "parameters found): build a fresh model to parallelize it again")
    for i, block in enumerate(model.blocks):
        for name in ("attn1", "attn2"):
            attn = getattr(block, name)
            if getattr(attn, "fused_projections", False):
                raise ValueError(f"blocks[{i}].{name} has fused projections; call "
                                 "model.unfuse_qkv_projections() before parallelize_wan")


SPLIT = {"to_q", "to_k", "to_v", "norm_q", "norm_k", "proj", "add_k_proj", "add_v_proj",
         "norm_added_k"}  # column-parallel layers and the q/k norms: all of their tensors


def tp_splits(name: str) -> bool:
    """Whether TP keeps 1/tp of the tensor ``name`` on each rank: the column-parallel layers'
    weights and biases, the q/k norms' weights, and the row-parallel layers' weights (their
    biases are added once, after the all-reduce, so every rank keeps them whole)."""
    parts = name.split(".")
    return parts[0] == "blocks" and (parts[-2] in SPLIT or parts[-3:] in (
        ["to_out", "0", "weight"], ["net", "2", "weight"]))


def sharded_param_names(model: nn.Module) -> list[str]:
    """Names of the parameters that TP splits 1/tp per rank; every other one is replicated."""
    return [name for name, _ in model.named_parameters() if tp_splits(name)]


def expected_tp_param_count(model: nn.Module, tp: int) -> int:
    """Parameters one TP rank holds after ``parallelize_wan``, from the unsharded ``model``."""
    split = set(sharded_param_names(model))
    return sum(p.numel() // tp if n in split else p.numel() for n, p in model.named_parameters())


def local_param_count(model: nn.Module) -> int:
    """Parameters this rank holds: a DTensor's local shard (its ``numel()`` is global)."""
    return sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel()
               for p in model.parameters())


def compile_blocks(model: nn.Module, **compile_kwargs) -> nn.Module:
    """``torch.compile(fullgraph=True)`` each block in place (``nn.Module.compile``).

    Per block rather than the whole forward: the blocks are alike, so after the first one
    compiles the others reuse its code or Inductor's cached kernels, and a compile costs
    seconds, not a minute. ``fullgraph=True`` turns any graph break into an error."""
    if any(getattr(m, "wire", PLAIN).staged for m in model.modules()):
        raise ValueError("compile_blocks: the model's collectives are staged through host "
                         "buffers (ranks sharing a GPU over gloo); a compiled graph cannot "
                         "hold those copies. Run it eagerly, or give each rank a GPU (NCCL)")
    compile_kwargs.setdefault("fullgraph", True)
    for block in model.blocks:
        block.compile(**compile_kwargs)
    return model
