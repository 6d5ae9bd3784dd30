"""A ``GenerateSpec`` as the plan of its layout, run by that layout's own code.

``ppdit generate --layout X`` runs exactly what a lesson runs for layout X (``ppdit.parallel``):
the folder is a ``ModelSource``, the folder's scheduler is the plan's solver, the prompts are
the plan's conditioning, and guidance computes ``WanPipeline``'s two batch-1 forwards. This
file is only the table from a layout's name to its plan::

    step    step split, one stage per rank (the handoff carries the solver's memory)
    pp_tp   step split over stages of 2 tensor-parallel ranks
    tp      one stage of tensor-parallel ranks
    layer   layer split, the conditional and unconditional halves as separate micro-batches
    sp      Ulysses sequence parallelism
    ring    ring attention: sequence parallelism for any head count
    cfg     CFG-parallel: the two halves on two ranks

Each plan validates itself (steps per stage, heads per rank, blocks per stage, ...), so the
rules of a layout are stated once, in its own folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ppdit.checkpoint.solver import folder_sampling
from ppdit.checkpoint.source import ModelSource
from ppdit.parallel.cfg.run import CFGPlan, run_cfg
from ppdit.parallel.layer_split.run import run_layer_split
from ppdit.parallel.layer_split.schedule import LayerSplitPlan
from ppdit.parallel.sequence.run import SPPlan, run_sp
from ppdit.parallel.step_split.plan import make_plan
from ppdit.parallel.step_split.run import run_step_split
from ppdit.runtime.trace import Trace
from ppdit.sampler import Conditioning, Request
from ppdit.t2v.spec import GenerateSpec

REQUEST_ID = 0  # one video per spec: its request id in every plan


@dataclass
class LayoutOutput:
    """The final latent, the merged timeline, and for step split the bytes one handoff
    carries, by tensor."""

    latent: torch.Tensor
    trace: Trace
    handoff_bytes: dict[str, int] = field(default_factory=dict)


def plan_for(spec: GenerateSpec, shape: tuple[int, ...], prompts: Conditioning | None = None):
    """The plan that runs ``spec`` on its layout (it validates itself: a spec its layout
    cannot run raises ``ValueError`` naming the rule and the values)."""
    source = ModelSource(folder=spec.checkpoint, dtype=spec.dtype)
    sampling = folder_sampling(source.scheduler(), spec.num_steps, spec.guidance_scale)
    requests = (Request(REQUEST_ID, spec.seed),)
    common = dict(sampling=sampling, source=source, latent_shape=shape, solver=spec.solver,
                  prompts=None if prompts is None else (prompts,), report_steps=True)
    r, layout = spec.ranks, spec.layout
    step = dict(first_seed=spec.seed, cfg="split", **common)  # make_plan's request: seed
    if layout == "step":
        return make_plan(r, 1, **step)
    if layout == "pp_tp":
        if r % 2 or r < 4:
            raise ValueError(f"layout 'pp_tp' runs stages of 2 TP ranks: ranks={r} must be "
                             "an even number >= 4")
        return make_plan(r // 2, 1, tp=2, **step)
    if layout == "tp":
        return make_plan(1, 1, tp=r, **step)
    if layout == "layer":
        halves = 2 if sampling.uses_cfg else 1  # one sample per micro-batch: batch-1 forwards
        return LayerSplitPlan(requests, r, halves, **common)
    if layout in ("sp", "ring"):
        attention = "ring" if layout == "ring" else "ulysses"
        return SPPlan(r, requests, cfg="split", attention=attention, **common)
    if layout == "cfg":
        if r != 2:
            raise ValueError(f"layout 'cfg' runs the conditional and unconditional halves on "
                             f"exactly 2 ranks, got ranks={r}")
        return CFGPlan(requests, **common)
    raise ValueError(f"layout={layout!r} has no plan (single runs in the caller's process)")


RUNS = {"step": run_step_split, "pp_tp": run_step_split, "tp": run_step_split,
        "layer": run_layer_split, "sp": run_sp, "ring": run_sp, "cfg": run_cfg}


def run_layout(spec: GenerateSpec, prompts: Conditioning, shape: tuple[int, ...], *,
               on_step=None, pool=None, **launch_kwargs) -> LayoutOutput | None:
    """Launch ``spec.ranks`` ranks (or use ``pool``) and run the layout's plan; ``None`` on
    torchrun ranks other than 0. ``on_step(i)`` hears of every finished step."""
    plan = plan_for(spec, shape, prompts)
    launch_kwargs.setdefault("timeout_s", spec.timeout_s)
    events = None if on_step is None else (
        lambda rank, e: on_step(e[1]) if e[0] == "step" else None)  # not ("done", request)
    out = RUNS[spec.layout](plan, on_event=events, pool=pool, **launch_kwargs)
    if out is None:
        return None
    handoff = plan.handoff_bytes() if spec.layout in ("step", "pp_tp") else {}
    trace = out.traces[-1]
    return LayoutOutput(out.latents[REQUEST_ID], trace, handoff)


__all__ = ["RUNS", "LayoutOutput", "plan_for", "run_layout"]
