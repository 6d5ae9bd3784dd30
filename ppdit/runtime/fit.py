"""Refuse, with the numbers, a launch whose weights cannot fit, before any rank builds them.

A seeded preset is built whole on every rank (TP, FSDP, layer split shard it after); a pipeline
folder is read share by share (``checkpoint.partial``; ``rank_bytes`` counts it). Ranks that
share a device hold a share each: 14B in bf16 is 28.6 GB, so four step-split ranks (whole
copies) on one 80 GB GPU run out of memory minutes into loading, while four TP ranks hold one
model between them. The weights are a lower bound of what a rank needs (activations, text
embeddings and the VAE come on top): a launch they already overflow is refused in the caller.
"""

from __future__ import annotations

import math
import os

import torch

from ppdit.model import Experts
from ppdit.runtime.device import PlacementDecision

TP_SPLIT = {"to_q", "to_k", "to_v", "norm_q", "norm_k", "proj"}  # tensor.parallelize's layers


def weight_bytes(source, part: str = "dit", split: dict[str, int] | None = None) -> int:
    """Bytes of the parameters and buffers of the ``part`` ("dit" or "vae") the plans'
    ``source`` builds (on the meta device: shapes only, nothing allocated); of a folder's DiT,
    one rank's share under the layout degrees ``split`` (``Layout.split()``)."""
    model = source.dit("meta") if part == "dit" else source.vae("meta")
    if isinstance(model, Experts):  # Wan 2.2: a step-split rank holds one expert (expert_stages)
        held = 1 if (split or {}).get("step", 1) > 1 else len(model.held)
        return held * rank_bytes(model.expert(0), split or {})
    if part == "dit" and source.folder is not None:
        return rank_bytes(model, split or {})
    return sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))


def rank_bytes(model, split: dict[str, int]) -> int:
    """The bytes the busiest rank keeps of ``model`` (whole, e.g. on the meta device) when it
    reads only its share: of each block, 1/tp of TP's split layers (weights, column biases,
    q/k norms: ``tensor.parallelize.sharded_param_names``) or ceil(rows / fsdp) of every tensor
    (FSDP2 splits dim 0); ceil(blocks / layer) blocks. Embedders and head count whole (a
    layer-split end holds only its own: a few MB over)."""
    tp, fsdp, blocks = split.get("tp", 1), split.get("fsdp", 1), len(model.blocks)
    kept, total = math.ceil(blocks / split.get("layer", 1)) / blocks, 0.0  # a stage's blocks
    for name, t in (*model.named_parameters(), *model.named_buffers()):
        size, parts = t.numel() * t.element_size(), name.split(".")
        if parts[0] == "blocks":
            size *= kept
            if fsdp > 1 and t.dim():
                size *= math.ceil(t.shape[0] / fsdp) / t.shape[0]
            if parts[-2] in TP_SPLIT or parts[-3:] in (["to_out", "0", "weight"],
                                                        ["net", "2", "weight"]):
                size /= tp
        total += size
    return math.ceil(total)


def split_of(plan) -> dict[str, int]:
    """A plan's layout degrees (``Layout.split()``; a layer-split plan: its stages)."""
    if hasattr(plan, "layout"):
        return plan.layout.split()
    return {"layer": plan.num_stages} if hasattr(plan, "num_stages") else {}


def device_bytes(decision: PlacementDecision) -> int:
    """The memory of one device of the decision: a GPU's total, or the host's RAM."""
    if decision.kind != "cpu" and torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory
    return host_bytes()


def host_bytes() -> int:
    """This host's RAM."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(source, world_size: int, decision: PlacementDecision,
               capacity: int | None = None, part: str = "dit",
               split: dict[str, int] | None = None, host: int | None = None) -> None:
    """``ValueError`` naming the sizes when the ranks on one device cannot hold their shares
    (layout degrees ``split``) of the weights; on GPUs, also when this host's ranks cannot
    build them in its RAM at once (each builds its share on the host, then moves it:
    ``runtime.rounds``). ``capacity``, ``host``: the device's and the host's memory (tests)."""
    each = weight_bytes(source, part, split)
    cpu = decision.kind == "cpu" or decision.gpus == 0  # then every rank shares the host
    sharing = world_size if cpu else math.ceil(world_size / decision.gpus)  # the busiest device
    have = device_bytes(decision) if capacity is None else capacity
    layout = ",".join(f"{k}={v}" for k, v in (split or {}).items())
    shared = part == "dit" and source.folder and {"tp", "fsdp", "layer"} & {*(split or ())}
    held = (f"its share under {layout}" if shared else f"the whole {part.upper()}") + (
        f", in {source.dtype}")
    if sharing * each > have:
        where = "the host's RAM" if decision.kind == "cpu" else "one GPU"
        raise ValueError(
            f"{sharing} rank(s) on {where} would hold {sharing} x {each / 1e9:.3g} GB of "
            f"{source.name} weights = {sharing * each / 1e9:.3g} GB, more than its "
            f"{have / 1e9:.3g} GB (each holds {held}). Use fewer ranks per device, more "
            "devices, a layout that shards the weights (tp, fsdp, layer) or a smaller dtype.")
    ram = host_bytes() if host is None else host
    if not cpu and world_size * each > ram:
        raise ValueError(
            f"{world_size} rank(s) on this host would each build {each / 1e9:.3g} GB of "
            f"{source.name} weights in host RAM before moving them to a GPU: "
            f"{world_size * each / 1e9:.3g} GB at once, more than the host's {ram / 1e9:.3g} GB "
            f"(each builds {held}). Use fewer ranks per host or a layout that shards the "
            "weights (tp, fsdp, layer).")
