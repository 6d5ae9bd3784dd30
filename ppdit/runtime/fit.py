"""Refuse, with the numbers, a launch whose weights cannot fit, before any rank builds them.

Every rank of every layout builds the whole DiT (step split by design; TP, SP and layer split
build it before they shard or drop blocks). Ranks that share a device therefore hold one copy
each: 14B in bf16 is 28.6 GB of weights, so three ranks on one 80 GB GPU run out of memory
minutes into loading, with an allocator message that names no layout. The weights alone are
a lower bound of what a rank needs (activations, text embeddings and the VAE come on top), so a
launch they already overflow is refused here, in the caller, with the sizes that decide it.
"""

from __future__ import annotations

import math
import os

import torch

from ppdit.runtime.device import PlacementDecision


def weight_bytes(source, part: str = "dit") -> int:
    """Bytes of the parameters and buffers of the ``part`` ("dit" or "vae") the plans'
    ``source`` builds (on the meta device: shapes only, nothing allocated)."""
    model = source.dit("meta") if part == "dit" else source.vae("meta")
    return sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))


def device_bytes(decision: PlacementDecision) -> int:
    """The memory of one device of the decision: a GPU's total, or the host's RAM."""
    if decision.kind != "cpu" and torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(source, world_size: int, decision: PlacementDecision,
               capacity: int | None = None, part: str = "dit") -> None:
    """``ValueError`` naming the sizes when the ranks on one device cannot hold their copies
    of the ``part``'s weights. ``capacity`` overrides the device's memory (tests, what-ifs)."""
    each = weight_bytes(source, part)
    cpu = decision.kind == "cpu" or decision.gpus == 0  # then every rank shares the host
    sharing = world_size if cpu else math.ceil(world_size / decision.gpus)  # the busiest device
    have = device_bytes(decision) if capacity is None else capacity
    if sharing * each > have:
        where = "the host's RAM" if decision.kind == "cpu" else "one GPU"
        raise ValueError(
            f"{sharing} rank(s) on {where} would hold {sharing} x {each / 1e9:.3g} GB of "
            f"{source.name} weights = {sharing * each / 1e9:.3g} GB, more than its "
            f"{have / 1e9:.3g} GB (every rank builds the whole {part.upper()}). Use fewer ranks "
            "per device, more devices, or a smaller dtype.")
