"""A ``GenerateSpec`` as the plan of its layout, run by that layout's own code.

``ppdit generate --layout X`` runs exactly what a lesson runs for layout X (``ppdit.parallel``):
the folder is a ``ModelSource``, the folder's scheduler is the plan's solver, the prompts are
the plan's conditioning, and guidance computes ``WanPipeline``'s two batch-1 forwards. This
file is only the table from a layout (``t2v.layout.Layout``: the degree of each axis) to its
plan::

    step (x tp)            step split, stages of tp tensor-parallel ranks (the handoff carries
                           the solver's memory); tp alone is one stage
    layer                  layer split, the guided halves as separate micro-batches
    cfg                    CFG-parallel: the two halves on two ranks
    (cfg x) ulysses x ring sequence parallelism: Ulysses, ring attention, or both (USP), in
                           each of the CFG branches

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
from ppdit.parallel.step_split.plan import StepSplitPlan, make_plan
from ppdit.parallel.step_split.run import run_step_split
from ppdit.runtime.observe.trace import Trace
from ppdit.sampler import Conditioning, Request
from ppdit.t2v.layout import Layout
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
    m = spec.mesh
    axes = set(m.split()) - {"fsdp"}
    if m.fsdp > 1 and not (axes and axes <= {"cfg", "ulysses", "ring"}):
        raise ValueError(f"layout {m}: fsdp shards the weights over ranks that each run their "
                         "own part of the same forward, block by block in lockstep (the "
                         "all-gathers need it): the sequence axes, the guidance halves, or "
                         "both, e.g. cfg=2,fsdp=2 or ulysses=2,fsdp=2; alone every rank would "
                         "compute the same video")
    if axes and axes <= {"step", "tp"}:
        return make_plan(m.step, 1, tp=m.tp, first_seed=spec.seed, cfg="split", **common)
    if axes == {"layer"}:
        halves = 2 if sampling.uses_cfg else 1  # one sample per micro-batch: batch-1 forwards
        return LayerSplitPlan(requests, m.layer, halves, **common)
    if axes == {"cfg"} and m.fsdp == 1:
        return CFGPlan(requests, **common)
    if axes and axes <= {"cfg", "ulysses", "ring"}:
        return SPPlan(m.ulysses * m.ring, requests, cfg="split", attention=_attention(m),
                      ring_degree=m.ring if m.ulysses > 1 and m.ring > 1 else None,
                      cfg_parallel=m.cfg == 2, fsdp=m.fsdp > 1, **common)
    if not axes:
        raise ValueError("the single layout has no plan (it runs in the caller's process)")
    raise ValueError(f"layout {m} composes axes that do not compose here: the sequence axes "
                     "(ulysses, ring) compose with cfg, step with tp; layer stands alone")


def _attention(m: Layout) -> str:
    if m.ulysses > 1 and m.ring > 1:
        return "usp"
    return "ring" if m.ring > 1 else "ulysses"


def _runner(plan):
    return {StepSplitPlan: run_step_split, LayerSplitPlan: run_layer_split, SPPlan: run_sp,
            CFGPlan: run_cfg}[type(plan)]


def run_layout(spec: GenerateSpec, prompts: Conditioning, shape: tuple[int, ...], *,
               on_step=None, pool=None, **launch_kwargs) -> LayoutOutput | None:
    """Launch ``spec.ranks`` ranks (or use ``pool``) and run the layout's plan; ``None`` on
    torchrun ranks other than 0. ``on_step(i)`` hears of every finished step."""
    plan = plan_for(spec, shape, prompts)
    launch_kwargs.setdefault("timeout_s", spec.timeout_s)
    events = None if on_step is None else (
        lambda rank, e: on_step(e[1]) if e[0] == "step" else None)  # not ("done", request)
    out = _runner(plan)(plan, on_event=events, pool=pool, **launch_kwargs)
    if out is None:
        return None
    handoff = plan.handoff_bytes() if isinstance(plan, StepSplitPlan) and spec.mesh.step > 1 \
        else {}
    trace = out.traces[-1]
    return LayoutOutput(out.latents[REQUEST_ID], trace, handoff)


__all__ = ["LayoutOutput", "plan_for", "run_layout"]
