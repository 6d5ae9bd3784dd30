"""Read only part of a folder's transformer: the tensors a rank keeps, never the whole model.

``from_pretrained`` reads every tensor, so a rank that keeps a quarter of the blocks (layer
split) or a slice of each block (FSDP) would first hold all of them: eight ranks of one host
would hold 8 x 28.6 GB of Wan 2.1-14B while loading. Here the transformer is built on the meta
device (shapes only), the caller drops or shards what the rank does not keep, memory is
allocated for what remains, and each tensor is read from the safetensors file(s) on its own
(the file is mapped, never loaded whole). RoPE's tables (buffers computed at construction,
absent on the meta device) are computed afresh.

The dtypes are ``from_pretrained(torch_dtype=...)``'s: Wan's fp32-kept modules stay fp32
(``model.cast_like_from_pretrained``), the rest cast from the file's dtype as it would.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open

from ppdit.model import cast_like_from_pretrained, mark_variant, torch_dtype

# (the parameter as this rank holds it, the stored tensor's lazy slice) -> bytes read
Reader = Callable[[torch.Tensor, object], int]


def meta_transformer(folder: str | Path, dtype: str, part: str = "transformer"):
    """The folder's transformer (or ``transformer_2``) on the meta device, in the dtypes
    ``from_pretrained`` gives."""
    from diffusers import WanTransformer3DModel

    path = Path(folder) / part
    with torch.device("meta"):
        model = WanTransformer3DModel.from_config(
            WanTransformer3DModel.load_config(path, local_files_only=True))
    cast_like_from_pretrained(model, torch_dtype(dtype))
    return mark_variant(model, Path(folder))


def read_whole(param: torch.Tensor, stored) -> int:
    """The default reader: the whole stored tensor into the parameter."""
    rows = stored[:]
    param.copy_(rows)
    return rows.numel() * rows.element_size()


@torch.no_grad()
def fill_from_folder(model, folder: str | Path, device: torch.device,
                     reader: Reader = read_whole) -> int:
    """Allocate ``model``'s remaining (meta) tensors on ``device`` and read each from the
    folder; returns the largest single read (the one tensor in flight beside the model)."""
    model.to_empty(device=device)
    _fresh_rope(model, device)
    files = _files(Path(folder) / "transformer")
    largest = 0
    for name, param in model.named_parameters():
        with safe_open(files[name], framework="pt") as f:
            largest = max(largest, reader(param, f.get_slice(name)))
    return largest


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
