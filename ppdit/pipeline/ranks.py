"""Prompt-to-video denoising spread over ranks: every layout of ppdit, on a pipeline folder.

Each rank loads the transformer and the scheduler from the folder (identical weights without
communication); the caller encodes the prompts once and hands the embeddings to every rank (see
``encode.py``); the final latent comes back to the caller, which decodes it. In between:

* ``step`` / ``pp_tp``: stage s runs a contiguous slice of the steps (``pp_tp``: each stage a
  2-rank TP group); the handoff is the latent *and the scheduler's memory* (``solver.py``).
* ``layer``: blocks split over ranks; per step the cond and uncond tokens ``h`` flow through the
  stages, the last stage guides and updates and sends the new latent back to stage 0. The
  solver memory never moves: it lives on the last stage, the only one that updates.
* ``tp`` / ``sp``: every rank runs every step; the forward is sharded by heads (TP) or tokens
  (Ulysses SP), and every rank updates the same latent.
* ``cfg``: two ranks, one half of each guided step each (``ppdit.parallel.cfg``).

The step loop and its arithmetic are ``denoise.py``'s, so each layout equals the single device
bit for bit where the forward is the same (step, layer, cfg) and within a named tolerance where
the forward's sums are split (tp, sp).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import torch
import torch.distributed as dist

from ppdit.model import condition, epilogue, prologue, run_blocks
from ppdit.parallel.partition import even_sizes, to_ranges
from ppdit.pipeline.denoise import denoise, initial_state, make_denoiser
from ppdit.pipeline.encode import PromptEmbeds
from ppdit.pipeline.load import load_folder
from ppdit.pipeline.solver import recv_state, send_state, state_nbytes
from ppdit.pipeline.spec import GenerateSpec, latent_shape
from ppdit.runtime.launch import launch
from ppdit.runtime.p2p import recv_tensor, send_tensor
from ppdit.runtime.trace import Trace, Tracer, merge
from ppdit.sampler import guide


@dataclass
class LayoutOutput:
    """The final latent (from whichever rank finished it), the merged timeline, and for step
    split the bytes one handoff carried, by tensor."""

    latent: torch.Tensor
    trace: Trace
    handoff_bytes: dict[str, int] = field(default_factory=dict)


def prepare(rank: int, world_size: int, spec: GenerateSpec, embeds: PromptEmbeds):
    """Each rank loads the transformer and scheduler before the process group starts."""
    return load_folder(spec.checkpoint, dtype=spec.dtype, parts=("transformer", "scheduler"))


def layout_worker(ctx, spec: GenerateSpec, embeds: PromptEmbeds) -> dict:
    """One rank's part of ``spec.layout``; returns its latent (or None), trace, handoff."""
    parts = ctx.prepared or prepare(ctx.rank, ctx.world_size, spec, embeds)
    model = parts.transformer.to(ctx.device)
    embeds = PromptEmbeds(embeds.text.to(ctx.device),
                          None if embeds.negative is None else embeds.negative.to(ctx.device))
    tracer = Tracer(ctx.rank, ctx.placement)
    tracer.align()
    run = LAYOUTS[spec.layout]
    latent, handoff = run(ctx, spec, model, parts.scheduler, embeds, tracer,
                          latent_shape(spec, parts.vae_factors, model.config.in_channels))
    return {"latent": latent, "trace": tracer.finish(), "handoff": handoff}


def run_layout(spec: GenerateSpec, embeds: PromptEmbeds, *, on_step=None, pool=None,
               **launch_kwargs) -> LayoutOutput | None:
    """Launch ``spec.ranks`` ranks (or use ``pool``) and run the layout; ``None`` on torchrun
    ranks other than 0."""
    launch_kwargs.setdefault("timeout_s", spec.timeout_s)
    events = None if on_step is None else (lambda rank, e: on_step(e[1]))
    out = launch(layout_worker, spec.ranks, args=(spec, embeds), setup=prepare,
                 on_event=events, pool=pool, **launch_kwargs)
    if out is None:
        return None
    latent = next(r["latent"] for r in out if r["latent"] is not None)
    handoff = next((r["handoff"] for r in out if r["handoff"]), {})
    return LayoutOutput(latent, merge([r["trace"] for r in out]), handoff)


# -- the layouts ------------------------------------------------------------------------------


def _den(spec, model, scheduler, forward=None):
    return make_denoiser(model, scheduler, spec.num_steps, spec.guidance_scale, forward=forward,
                         solver=spec.solver)


def _span(tracer: Tracer, i: int):
    return tracer.span("compute", f"step {i}", step=i)


def _every_rank(ctx, spec, den, embeds, tracer, shape):
    """TP, SP: all ranks run all steps on the same latent; rank 0 reports and returns it."""
    state = initial_state(den, spec.seed, shape)
    report = (lambda i: ctx.emit(("step", i))) if ctx.rank == 0 else None
    state = denoise(den, state, embeds, range(spec.num_steps), partial(_span, tracer), report)
    return (state.latent if ctx.rank == 0 else None), {}


def run_tp(ctx, spec, model, scheduler, embeds, tracer, shape):
    """Megatron TP over all ranks (``ppdit.parallel.tensor``)."""
    from ppdit.parallel.tensor.parallelize import parallelize_wan

    model = parallelize_wan(model, tp_group=dist.group.WORLD, staged=ctx.placement.staged)
    return _every_rank(ctx, spec, _den(spec, model, scheduler), embeds, tracer, shape)


def run_sp(ctx, spec, model, scheduler, embeds, tracer, shape):
    """Ulysses sequence parallelism over all ranks (``ppdit.parallel.sequence``)."""
    from ppdit.parallel.sequence.comms import even_split
    from ppdit.parallel.sequence.ulysses import install_ulysses

    _, _, f, h, w = shape
    split = even_split(f * (h // 2) * (w // 2), ctx.world_size)
    group, staged = dist.group.WORLD, ctx.placement.staged
    install_ulysses(model, group, split, v_first=True, staged=staged)
    forward = partial(_sp_call, model, group, split, staged)
    return _every_rank(ctx, spec, _den(spec, model, scheduler, forward), embeds, tracer, shape)


def _sp_call(model, group, split, staged, latent, timestep, text):
    from ppdit.parallel.sequence.ulysses import sp_forward

    return sp_forward(model, latent, timestep, text, group, split, staged)


def run_cfg(ctx, spec, model, scheduler, embeds, tracer, shape):
    """CFG-parallel: rank 0 the conditional half, rank 1 the unconditional one."""
    from ppdit.parallel.cfg.ranks import cfg_parallel_velocity

    den = _den(spec, model, scheduler)
    state = initial_state(den, spec.seed, shape)
    texts = (embeds.text, embeds.negative)
    for i in range(spec.num_steps):
        with _span(tracer, i):
            t = den.timesteps[i].expand(state.latent.shape[0])
            with torch.no_grad():
                v = cfg_parallel_velocity(den.forward, state.latent, t, texts,
                                          spec.guidance_scale, ctx.rank,
                                          staged=ctx.placement.staged)
            [state] = den.update([state], v)
        if ctx.rank == 0:
            ctx.emit(("step", i))
    return (state.latent if ctx.rank == 0 else None), {}


def run_step(ctx, spec, model, scheduler, embeds, tracer, shape, tp: int = 1):
    """Step split (``tp=1``) or PP x TP (``tp=2``): stage ``rank // tp`` runs its steps."""
    from ppdit.parallel.step_split.plan import split_steps

    stage, tp_rank, stages = ctx.rank // tp, ctx.rank % tp, ctx.world_size // tp
    if tp > 1:
        from ppdit.parallel.tensor.parallelize import parallelize_wan

        groups = [dist.new_group(list(range(s * tp, (s + 1) * tp))) for s in range(stages)]
        model = parallelize_wan(model, tp_group=groups[stage], staged=ctx.placement.staged)
    den = _den(spec, model, scheduler)
    steps = split_steps(spec.num_steps, stages)[stage]
    wire = ctx.wire
    if stage == 0:
        state = initial_state(den, spec.seed, shape)
    else:
        with tracer.span("recv", f"steps {steps.start}.."):
            state = recv_state(ctx.rank - tp, den.solver and den.solver.initial_state(),
                               den.timesteps, **wire)
    report = (lambda i: ctx.emit(("step", i))) if tp_rank == 0 else None
    state = denoise(den, state, embeds, steps, partial(_span, tracer), report)
    if stage == stages - 1:
        return (state.latent if tp_rank == 0 else None), {}
    with tracer.span("send", f"after step {steps.stop - 1}"):
        send_state(state, ctx.rank + tp, **wire)
    return None, state_nbytes(state)


def run_layer(ctx, spec, model, scheduler, embeds, tracer, shape):
    """Layer split: blocks over ranks; cond and uncond tokens flow through every step (the
    arithmetic of ``denoise.velocity``, spread over stages)."""
    den = _den(spec, model, scheduler)
    rank, world, wire = ctx.rank, ctx.world_size, ctx.wire
    blocks = to_ranges(even_sizes(len(model.blocks), world))[rank]
    first, last = rank == 0, rank == world - 1
    texts = [embeds.text] if embeds.negative is None else [embeds.text, embeds.negative]
    state = initial_state(den, spec.seed, shape)  # the latent at stage 0, the solver at the last
    dtype = model.dtype
    for i in range(spec.num_steps):
        if first and i > 0 and not last:
            with tracer.span("recv", f"latent {i}"):
                state.latent = recv_tensor(world - 1, **wire)
        t = den.timesteps[i].expand(1)
        halves = []
        for k, text in enumerate(texts):
            name = f"step {i} {'cond' if k == 0 else 'uncond'}"
            with tracer.span("compute", name, step=i), torch.no_grad():
                if first:
                    h, sctx = prologue(model, state.latent.to(dtype), t, text)
                else:
                    sctx = condition(model, shape, t, text)
                    h = recv_tensor(rank - 1, **wire)
                h = run_blocks(model, h, sctx, blocks)
                if last:
                    halves.append(epilogue(model, h, sctx))
            if not last:
                send_tensor(h, rank + 1, **wire)
        if last:
            v = halves[0] if len(halves) == 1 else guide(halves[0], halves[1],
                                                         spec.guidance_scale)
            [state] = den.update([state], v)
            ctx.emit(("step", i))
            if i < spec.num_steps - 1 and not first:
                with tracer.span("send", f"latent {i + 1}"):
                    send_tensor(state.latent, 0, **wire)
    return (state.latent if last else None), {}


LAYOUTS = {"step": run_step, "pp_tp": partial(run_step, tp=2), "layer": run_layer,
           "tp": run_tp, "sp": run_sp, "cfg": run_cfg}

__all__ = ["LAYOUTS", "LayoutOutput", "layout_worker", "prepare", "run_layout"]
