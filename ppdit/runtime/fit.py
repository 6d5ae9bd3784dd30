"""Refuse, with the numbers, a launch whose weights cannot fit, before any rank builds them.

A seeded preset is built whole on every rank (TP, FSDP, layer split shard it after); a pipeline
folder is read share by share (``checkpoint.partial``; ``parallel.share`` counts it). Ranks that
share a device hold a share each: 14B in bf16 is 28.6 GB, so four step-split ranks (whole
copies) on one 80 GB GPU run out of memory minutes into loading, while four TP ranks hold one
model between them. The weights are a lower bound of what a rank needs (activations, text
embeddings and the VAE come on top): a launch they already overflow is refused in the caller.
"""

from __future__ import annotations

import math
import os

import torch

from ppdit.runtime.device import PlacementDecision


def device_bytes(decision: PlacementDecision) -> int:
    """The memory of one device of the decision: a GPU's total, or the host's RAM."""
    if decision.kind != "cpu" and torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory
    return host_bytes()


def host_bytes() -> int:
    """This host's RAM."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(each: int, world_size: int, decision: PlacementDecision, *, name: str,
               holds: str, capacity: int | None = None, host: int | None = None) -> None:
    """``ValueError`` naming the sizes when the ranks on one device cannot hold ``each`` bytes
    of ``name``'s weights apiece (what each ``holds``, in words: ``parallel.share``); on GPUs,
    also when this host's ranks cannot build them in its RAM at once (each builds its share on
    the host, then moves it). ``capacity``, ``host``: the device's and the host's memory."""
    cpu = decision.kind == "cpu" or decision.gpus == 0  # then every rank shares the host
    sharing = world_size if cpu else math.ceil(world_size / decision.gpus)  # the busiest device
    have = device_bytes(decision) if capacity is None else capacity
    if sharing * each > have:
        where = "the host's RAM" if decision.kind == "cpu" else "one GPU"
        raise ValueError(
            f"{sharing} rank(s) on {where} would hold {sharing} x {each / 1e9:.3g} GB of "
            f"{name} weights = {sharing * each / 1e9:.3g} GB, more than its "
            f"{have / 1e9:.3g} GB (each holds {holds}). Use fewer ranks per device, more "
            "devices, a layout that shards the weights (tp, fsdp, layer) or a smaller dtype.")
    ram = host_bytes() if host is None else host
    if not cpu and world_size * each > ram:
        raise ValueError(
            f"{world_size} rank(s) on this host would each build {each / 1e9:.3g} GB of "
            f"{name} weights in host RAM before moving them to a GPU: "
            f"{world_size * each / 1e9:.3g} GB at once, more than the host's {ram / 1e9:.3g} GB "
            f"(each builds {holds}). Use fewer ranks per host or a layout that shards the "
            "weights (tp, fsdp, layer).")
