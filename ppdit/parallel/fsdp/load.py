"""Load a folder's transformer straight into FSDP shards: no rank ever holds the whole model.

Building the whole model and then sharding it means every rank first holds all of it: eight
ranks of one host would hold 8 x 28.6 GB of Wan 2.1-14B while loading. Here the model is built
on the meta device (shapes only), its blocks sharded (``shard.shard_blocks``: each parameter
becomes a DTensor split along its first dimension), memory allocated for this rank's shards
only, and each shard read from the safetensors file(s) as a slice of rows: the file is mapped,
never loaded whole. The small root (embedders, head) is read whole on every rank, and RoPE's
tables (buffers computed at construction, absent on the meta device) are computed afresh.

The dtypes are ``from_pretrained(torch_dtype=...)``'s: Wan's fp32-kept modules stay fp32
(``model.cast_like_from_pretrained``), the rest cast from the file's dtype as it would cast them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors import safe_open

from ppdit.checkpoint.source import ModelSource
from ppdit.model import cast_like_from_pretrained, torch_dtype
from ppdit.parallel.fsdp.shard import local_parameter_bytes, ready, shard_blocks


def load_sharded(source: ModelSource, group, device: torch.device) -> tuple[object, int]:
    """The folder's transformer with its blocks sharded over ``group``, read shard by shard;
    and the most tensor bytes the rank held while loading: its allocated shards and root, plus
    the one slice being copied in (slices are read one at a time and dropped after the copy)."""
    folder = Path(source.folder) / "transformer"
    model = source.dit(device="meta")
    cast_like_from_pretrained(model, torch_dtype(source.dtype))
    shard_blocks(model, group, device.type, materialized=False)
    model.to_empty(device=device)
    _fresh_rope(model, device)
    rank = dist.get_rank(group) if group is not None else dist.get_rank()
    world = dist.get_world_size(group) if group is not None else dist.get_world_size()
    files = _files(folder)
    largest = 0
    with torch.no_grad():
        for name, param in model.named_parameters():
            with safe_open(files[name], framework="pt") as f:
                largest = max(largest, _read_into(param, f.get_slice(name), rank, world))
    ready(model)
    return model.eval().requires_grad_(False), local_parameter_bytes(model) + largest


def _read_into(param, stored, rank: int, world: int) -> int:
    """Copy this rank's rows of a stored tensor into its (local) parameter; the bytes read."""
    local = param.to_local() if hasattr(param, "to_local") else param
    if local is param:  # whole on every rank (the root)
        rows = stored[:]
    else:
        start = rank * math.ceil(stored.get_shape()[0] / world)  # FSDP2 chunks dim 0
        rows = stored[start:start + local.shape[0]]
    local.copy_(rows)
    return rows.numel() * rows.element_size()


def _fresh_rope(model, device: torch.device) -> None:
    """RoPE's cos/sin tables, computed as the model's constructor computes them."""
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    cfg = model.config
    rope = WanRotaryPosEmbed(cfg.attention_head_dim, cfg.patch_size, cfg.rope_max_seq_len)
    for name, buffer in rope.named_buffers():
        getattr(model.rope, name).data = buffer.to(device)


def _files(folder: Path) -> dict[str, Path]:
    """Parameter name -> the safetensors file holding it (one file, or an index of shards)."""
    index = folder / "diffusion_pytorch_model.safetensors.index.json"
    if index.exists():
        return {k: folder / v for k, v in json.loads(index.read_text())["weight_map"].items()}
    single = folder / "diffusion_pytorch_model.safetensors"
    with safe_open(single, framework="pt") as f:
        return dict.fromkeys(f.keys(), single)


__all__ = ["load_sharded"]
