"""Load a folder's transformer straight into TP shards: no rank ever holds the whole model.

The usual way (``plan.source.dit()`` then ``parallelize_wan``) reads every tensor and then
keeps 1/tp of the split ones. Here (``checkpoint.partial``) the transformer is built on the
meta device and parallelized there, so each split layer already has its shard's shape; memory
is allocated for those shards and the replicated rest, and each shard is read from the
safetensors file as the slice ``parallelize_wan`` would have cut (``layers._shard``: the
rank's contiguous 1/tp along the split dimension).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ppdit.checkpoint.partial import fill_from_folder, meta_transformer
from ppdit.checkpoint.source import ModelSource
from ppdit.parallel.tensor.parallelize import parallelize_wan
from ppdit.runtime.observe.memory import track_peak_memory
from ppdit.runtime.processes.rank import RankContext


def shard_index(local: torch.Size, stored: list[int], rank: int) -> tuple[slice, ...]:
    """Where this rank's shard sits in the stored tensor: along the one dimension whose size
    differs, the rank's contiguous block; every other dimension whole."""
    split = [d for d, (n, full) in enumerate(zip(local, stored, strict=True)) if n != full]
    if len(split) > 1:
        raise ValueError(f"a shard of shape {tuple(local)} of a stored {tuple(stored)} differs "
                         "in more than one dimension: not a TP shard")
    return tuple(slice(rank * n, (rank + 1) * n) if d in split else slice(None)
                 for d, n in enumerate(local))


def load_tp(source: ModelSource, group, device: torch.device, **parallel_kwargs
            ) -> tuple[object, int]:
    """The folder's transformer, tensor-parallel over ``group``, read shard by shard; and the
    largest single read (the one tensor in flight beside the rank's shards)."""
    model = meta_transformer(source.folder, source.dtype)
    parallelize_wan(model, tp_group=group, **parallel_kwargs)
    rank = dist.get_rank(group)

    def read_shard(param: torch.Tensor, stored) -> int:
        piece = stored[shard_index(param.shape, stored.get_shape(), rank)]
        param.copy_(piece)
        return piece.numel() * piece.element_size()

    largest = fill_from_folder(model, source.folder, device, read_shard)
    return model.eval().requires_grad_(False), largest


def loading_worker(ctx: RankContext, folder: str) -> dict:
    """One rank of a TP group over every rank: read its shards from ``folder`` and report the
    bytes it holds, the most it held while loading (``runtime.observe.memory``), the largest
    single read, and its parameters (for a comparison with the whole model)."""
    with track_peak_memory(ctx.placement) as mem:
        model, largest = load_tp(ModelSource(folder=folder), None, ctx.device)
    held = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    return {"held": held, "peak": mem.peak_bytes, "largest": largest,
            "params": {n: p.detach().cpu().clone() for n, p in model.named_parameters()}}
