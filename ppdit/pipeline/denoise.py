"""The denoising loop of ``WanPipeline``, run by ppdit's ``Denoiser`` (its update hook carries
the folder's scheduler). Shared by one device and every layout: the layouts differ only in the
``forward`` they plug in (TP, SP), in who computes which half (CFG-parallel) or which steps
(step split), never in this arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ppdit.pipeline.encode import PromptEmbeds
from ppdit.pipeline.solver import SchedulerSolver
from ppdit.sampler import Denoiser, Request, SamplingConfig, StepState, guide


def make_denoiser(model: torch.nn.Module, scheduler, num_steps: int, guidance_scale: float, *,
                  forward: Callable[..., torch.Tensor] | None = None,
                  solver: str = "folder") -> Denoiser:
    """A ``Denoiser`` whose update is ``scheduler.step`` (``solver="folder"``), or ppdit's
    Euler on the same flow shift (``solver="euler"``: the teaching baseline)."""
    shift = float(scheduler.config.get("flow_shift", None) or scheduler.config.get("shift", 3.0))
    sampling = SamplingConfig(num_steps=num_steps, shift=shift, guidance_scale=guidance_scale)
    if solver not in ("folder", "euler"):
        raise ValueError(f"solver={solver!r} is not 'folder' (the pipeline's scheduler) or 'euler'")
    step = SchedulerSolver(scheduler, num_steps) if solver == "folder" else None
    return Denoiser(model, None, sampling, forward=forward, solver=step)


def initial_state(den: Denoiser, seed: int, shape: tuple[int, ...]) -> StepState:
    """Step 0: noise from ``torch.Generator().manual_seed(seed)`` on the CPU, as diffusers'
    ``prepare_latents`` draws it with such a generator (so the two agree bit for bit), plus the
    solver's empty memory."""
    state = den.initial_state(Request(0, seed), shape)
    if den.solver is not None:
        state.solver_state = den.solver.initial_state()
    return state


def velocity(den: Denoiser, latent: torch.Tensor, step: int, embeds: PromptEmbeds,
             forward: Callable[..., torch.Tensor] | None = None) -> torch.Tensor:
    """The guided velocity of one step, as ``WanPipeline``: the conditional forward, then the
    unconditional one (two batch-1 forwards, not one batch of 2: the same GEMM shapes as
    diffusers, hence the same bits), ``v_u + g (v_c - v_u)``."""
    forward = forward or den.forward
    t = den.timesteps[step].expand(latent.shape[0])
    v = forward(latent, t, embeds.text)
    if embeds.negative is None:
        return v
    return guide(v, forward(latent, t, embeds.negative), den.sampling.guidance_scale)


def denoise(den: Denoiser, state: StepState, embeds: PromptEmbeds, steps: range,
            span: Callable | None = None, on_step: Callable[[int], None] | None = None
            ) -> StepState:
    """Run ``steps`` from ``state``; ``span(i)`` times step i, ``on_step(i)`` reports it."""
    from contextlib import nullcontext

    if state.step_index != steps.start:
        raise ValueError(f"the state is at step {state.step_index}, these steps start at "
                         f"{steps.start}")
    for i in steps:
        with span(i) if span is not None else nullcontext():
            with torch.no_grad():
                v = velocity(den, state.latent, i, embeds)
            [state] = den.update([state], v)
        if on_step is not None:
            on_step(i)
    return state


__all__ = ["denoise", "initial_state", "make_denoiser", "velocity"]
