"""A ``LayoutPlan`` with ``pipefusion=P`` as layer split's plan with token patches."""

from __future__ import annotations

from ppdit.parallel.layer_split.schedule import LayerSplitPlan


def plan_from(plan) -> LayerSplitPlan:
    """P stages, ``plan.patches`` patches of every sample (the guided halves batched in each),
    the first ``plan.warmup_steps`` steps whole. A timestep per token (TI2V) or an image's
    channels are refused: their rows would need cutting with the patches too."""
    spec = plan.source.spec
    if getattr(spec, "expand_timesteps", False) or spec.condition_channels:
        raise ValueError(f"layout {plan.layout}: PipeFusion runs text-to-video models with one "
                         f"timestep per sample; {spec.name!r} conditions per token or on an "
                         "image (run it with layer split)")
    return LayerSplitPlan(plan.requests, plan.layout.pipefusion, plan.patches,
                          patches=plan.patches, warmup_steps=plan.warmup_steps,
                          sampling=plan.sampling, source=plan.source,
                          latent_shape=plan.latent_shape, solver=plan.solver,
                          prompts=plan.prompts, report_steps=plan.report_steps)
