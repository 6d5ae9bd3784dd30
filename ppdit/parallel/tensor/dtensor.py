"""The same Megatron split through DTensor's ``parallelize_module``, for comparison.

PyTorch's own TP API (https://docs.pytorch.org/tutorials/intermediate/TP_tutorial.html) states
the split declaratively: ``ColwiseParallel`` shards a linear by output features (``Shard(0)``)
and hands on a local (B, S, F/tp) tensor, ``RowwiseParallel`` by input features (``Shard(1)``),
turning its partial result into a replicated one with an all-reduce inside DTensor (a functional
collective: it traces). Every call goes through DTensor's sharding propagation: the eager cost
``torch.compile`` traces away.

DTensor's RMSNorm rule needs the normalized dim whole (a head-sharded q would be gathered), so
this variant reuses ``DistributedRMSNorm`` for q and k: both variants' communication is then
identical, and the comparison is about the machinery.
"""

from __future__ import annotations

import torch.distributed as dist
from diffusers import WanTransformer3DModel
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from ppdit.parallel.layout import check_tp_degree
from ppdit.parallel.tensor.layers import DistributedRMSNorm
from ppdit.parallel.tensor.parallelize import _check_plain_wan, _localize_heads
from ppdit.runtime.comm.wire import PLAIN, Wire


def block_plan(image: bool = False) -> dict:
    """The per-block ``parallelize_plan``: module paths -> ColwiseParallel / RowwiseParallel."""
    plan: dict = {}
    for attn in ("attn1", "attn2"):
        plan.update({f"{attn}.to_q": ColwiseParallel(), f"{attn}.to_k": ColwiseParallel(),
                     f"{attn}.to_v": ColwiseParallel(), f"{attn}.to_out.0": RowwiseParallel()})
    plan.update({"ffn.net.0.proj": ColwiseParallel(), "ffn.net.2": RowwiseParallel()})
    if image:  # Wan 2.1 I2V's projections of the CLIP tokens
        plan.update({"attn2.add_k_proj": ColwiseParallel(), "attn2.add_v_proj": ColwiseParallel()})
    return plan


def parallelize_wan_dtensor(model: WanTransformer3DModel, *, tp_group: dist.ProcessGroup,
                            device_type: str = "cpu", wire: Wire = PLAIN
                            ) -> WanTransformer3DModel:
    """Shard every block over ``tp_group`` with DTensor's ``parallelize_module``, in place.

    ``src_data_rank=None``: every rank already holds the same full weights (same seed), so each
    cuts its own shard locally instead of receiving it from rank 0."""
    if wire.staged:
        raise ValueError("DTensor issues its own collectives on the tensors it holds, and gloo "
                         "cannot move CUDA tensors: the DTensor variant needs a GPU per rank "
                         "(NCCL) or CPU ranks, not ranks sharing a GPU")
    tp, rank = dist.get_world_size(tp_group), dist.get_rank(tp_group)
    check_tp_degree(model.config, tp)
    if tp == 1:
        return model
    _check_plain_wan(model)
    mesh = DeviceMesh.from_group(tp_group, device_type=device_type)
    for block in model.blocks:
        image = block.attn2.add_k_proj is not None
        parallelize_module(block, mesh, block_plan(image), src_data_rank=None)
        for attn in (block.attn1, block.attn2):
            norms = ("norm_q", "norm_k") + (("norm_added_k",) if attn.add_k_proj else ())
            for name in norms:
                setattr(attn, name, DistributedRMSNorm(getattr(attn, name), rank=rank, tp=tp,
                                                       group=tp_group))
            _localize_heads(attn, tp)
    return model
