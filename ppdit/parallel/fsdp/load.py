"""Load a folder's transformer straight into FSDP shards: no rank ever holds the whole model.

Building the whole model and then sharding it means every rank first holds all of it. Here
(``checkpoint.partial``) the model is built on the meta device, its blocks sharded
(``shard.shard_blocks``: each parameter becomes a DTensor split along its first dimension),
memory allocated for this rank's shards only, and each shard read from the safetensors
file(s) as a slice of rows. The small root (embedders, head) is read whole on every rank.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from ppdit.checkpoint.partial import fill_from_folder, meta_transformer
from ppdit.checkpoint.source import ModelSource
from ppdit.parallel.fsdp.shard import ready, shard_blocks
from ppdit.runtime.observe.memory import held_bytes


def load_sharded(source: ModelSource, group, device: torch.device) -> tuple[object, int]:
    """The folder's transformer with its blocks sharded over ``group``, read shard by shard;
    and the most tensor bytes the rank held while loading: its allocated shards and root, plus
    the one slice being copied in (slices are read one at a time and dropped after the copy)."""
    model = meta_transformer(source.folder, source.dtype)
    shard_blocks(model, group, device.type, materialized=False)
    rank = dist.get_rank(group) if group is not None else dist.get_rank()
    world = dist.get_world_size(group) if group is not None else dist.get_world_size()

    def read_rows(param, stored) -> int:
        """Copy this rank's rows of a stored tensor into its (local) parameter."""
        local = param.to_local() if hasattr(param, "to_local") else param
        if local is param:  # whole on every rank (the root)
            rows = stored[:]
        else:
            start = rank * math.ceil(stored.get_shape()[0] / world)  # FSDP2 chunks dim 0
            rows = stored[start:start + local.shape[0]]
        local.copy_(rows)
        return rows.numel() * rows.element_size()

    largest = fill_from_folder(model, source.folder, device, read_rows)
    ready(model)
    return model.eval().requires_grad_(False), held_bytes(model) + largest
