"""What a rank holds of the model under a layout: one rule, read before any rank starts.

Of each block a TP rank keeps 1/tp of the split layers (``tensor.parallelize.tp_splits``), an
FSDP rank ceil(rows / fsdp) of every tensor (FSDP2 splits dim 0), a layer stage ceil(blocks /
layer) blocks, and a step-split stage of Wan 2.2 one expert (``step_split.plan.expert_stages``).
A seeded preset is built whole on every rank (the axes shard it after); a pipeline folder is
read share by share (``checkpoint.partial``). The runners' ``check`` hands the bytes to
``runtime.fit``, which knows devices, not models.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ppdit.model import held
from ppdit.parallel.tensor.parallelize import tp_splits
from ppdit.runtime.fit import check_fits
from ppdit.runtime.rounds import launch_placement


def rank_bytes(model, split: dict[str, int]) -> int:
    """The bytes the busiest rank keeps of ``model`` (whole, e.g. on the meta device) when it
    reads only its share under the layout degrees ``split`` (``Layout.split()``). Embedders
    and head count whole (a layer-split end holds only its own: a few MB over); a model with
    no ``blocks`` (the lessons' dummy DiT) counts whole."""
    tp, fsdp, blocks = split.get("tp", 1), split.get("fsdp", 1), len(getattr(model, "blocks", ()))
    kept, total = math.ceil(blocks / split.get("layer", 1)) / max(blocks, 1), 0.0
    for name, t in (*model.named_parameters(), *model.named_buffers()):
        size = t.numel() * t.element_size()
        if name.startswith("blocks."):
            size *= kept
            if fsdp > 1 and t.dim():
                size *= math.ceil(t.shape[0] / fsdp) / t.shape[0]
            size /= tp if tp_splits(name) else 1
        total += size
    return math.ceil(total)


def weight_bytes(source, part: str = "dit", split: dict[str, int] | None = None) -> int:
    """Bytes of the ``part`` ("dit" or "vae") that ``source`` builds (on the meta device:
    nothing allocated) one rank holds: of a folder's DiT or Wan 2.2's experts, its share."""
    if part != "dit":
        model = source.vae("meta")
        return sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    experts = held(source.dit("meta"))
    if len(experts) > 1:  # Wan 2.2: a step-split rank holds one expert
        kept = 1 if (split or {}).get("step", 1) > 1 else len(experts)
        return kept * rank_bytes(experts[0], split or {})
    return rank_bytes(experts[0], (split or {}) if source.folder is not None else {})


def check_weights(source, world_size: int, decision, part: str = "dit",
                  split: dict[str, int] | None = None, **capacities) -> None:
    """``runtime.fit.check_fits`` on one rank's share of ``source``'s weights, described."""
    layout = ",".join(f"{k}={v}" for k, v in (split or {}).items())
    shared = part == "dit" and source.folder and {"tp", "fsdp", "layer"} & {*(split or ())}
    holds = (f"its share under {layout}" if shared else f"the whole {part.upper()}") + (
        f", in {source.dtype}")
    check_fits(weight_bytes(source, part, split), world_size, decision, name=source.name,
               holds=holds, **capacities)


def check_plans(plans: Mapping[str, Any], world_size: int, launch_kwargs: dict) -> None:
    """A ``Runner.check``: plans run side by side share one model per rank (equal sources build
    identical weights), and the ranks sharing a device can hold their shares of it."""
    sources = {name: getattr(_plan(p), "source", None) for name, p in plans.items()}
    known = {s for s in sources.values() if s is not None}
    if len(known) > 1:
        raise ValueError(f"plans run side by side must share one model source, got {sources}")
    plan = next((_plan(p) for p in plans.values() if getattr(_plan(p), "source", None)), None)
    if plan is not None:
        local, decision = launch_placement(world_size, launch_kwargs)
        split = plan.layout.split() if hasattr(plan, "layout") else {}
        check_weights(plan.source, local, decision, getattr(plan, "weights", "dit"), split)


def _plan(plan: Any) -> Any:
    """A plan itself, or the first item of a (plan, variant) pair."""
    return _plan(plan[0]) if isinstance(plan, tuple) and plan else plan
