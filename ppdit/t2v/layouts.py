"""A ``GenerateSpec`` as a ``LayoutPlan``, run by the one runner (``ppdit.parallel.runner``).

``ppdit generate --layout X`` runs exactly what a lesson runs for layout X: the folder is a
``ModelSource``, the folder's scheduler is the plan's solver, the prompts are the plan's
conditioning, and guidance computes ``WanPipeline``'s two batch-1 forwards (``cfg="split"``).
The plan validates itself (``Layout``'s composition rule, the model's heads, blocks and steps),
so a request its layout cannot run fails before any rank starts, with the rule named.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ppdit.cache import CacheConfig
from ppdit.checkpoint.solver import folder_sampling
from ppdit.checkpoint.source import ModelSource
from ppdit.parallel.runner import LayoutPlan, run_plan
from ppdit.runtime.observe.trace import Trace
from ppdit.sampler import Conditioning, Request
from ppdit.t2v.spec import GenerateSpec

REQUEST_ID = 0  # one video per spec: its request id in every plan


def plan_for(spec: GenerateSpec, shape: tuple[int, ...], prompts: Conditioning | None = None
             ) -> LayoutPlan:
    """The plan that runs ``spec`` on its layout (reads the folder's scheduler once; a spec
    its layout cannot run raises ``ValueError`` naming the rule and the values)."""
    source = ModelSource(folder=spec.checkpoint, dtype=spec.dtype)
    sampling = folder_sampling(source.scheduler(), spec.num_steps, spec.guidance_scale,
                               boundary_ratio=source.boundary_ratio,
                               guidance_scale_2=spec.guidance_scale_2)
    return LayoutPlan(spec.layout, (Request(REQUEST_ID, spec.seed),), sampling, source, shape,
                      solver=spec.solver, cfg="split", report_steps=True,
                      cache=None if spec.cache_threshold is None else
                      CacheConfig(spec.cache_threshold),
                      prompts=None if prompts is None else (prompts,))


@dataclass
class LayoutOutput:
    """The final latent, the merged timeline, and for step split the bytes one handoff
    carries, by tensor."""

    latent: torch.Tensor
    trace: Trace
    handoff_bytes: dict[str, int] = field(default_factory=dict)


def run_layout(plan: LayoutPlan, *, on_step=None, pool=None, **launch_kwargs
               ) -> LayoutOutput | None:
    """Launch the plan's ranks (or use ``pool``) and run it; ``None`` on torchrun ranks other
    than 0. ``on_step(i)`` hears of every finished step."""
    events = None if on_step is None else (
        lambda rank, e: on_step(e[1]) if e[0] == "step" else None)  # not ("done", request)
    out = run_plan(plan, on_event=events, pool=pool, **launch_kwargs)
    if out is None:
        return None
    handoff = out.plan.handoff_bytes() if plan.layout.step > 1 else {}
    return LayoutOutput(out.latents[REQUEST_ID], out.traces[-1], handoff)
