"""The same layer split run by PyTorch's own ``torch.distributed.pipelining`` (ScheduleGPipe).

The baseline ppdit's layer split is measured against: identical stage models, micro-batches
and conditioning recompute, but the library's stage runtime and GPipe schedule. What differs:

* the library's stage modules may only pass tensors forward, so the timestep and the raw text
  embedding travel with ``h`` on every hop (each stage then recomputes the conditioning, as
  ppdit does), and its messages are the library's (shape metadata is inferred on the first
  step);
* ``ScheduleGPipe.step`` covers one denoising step: fill, run M micro-batches, drain. The Euler
  update and the return of the latents to stage 0 happen outside it, so every step flushes.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from ppdit.checkpoint.solver import plan_denoiser
from ppdit.model import condition, embed_patches, epilogue, run_blocks
from ppdit.parallel.layer_split.schedule import LayerSplitPlan
from ppdit.runtime.observe.trace import Tracer
from ppdit.sampler import StepState


class WanStage(nn.Module):
    """One pipeline stage as the library wants it: tensors in, tensors out."""

    def __init__(self, model, blocks: range, first: bool, last: bool, latent_shape, tracer):
        super().__init__()
        self.model, self.blocks, self.first, self.last = model, blocks, first, last
        self.latent_shape, self.tracer = tuple(latent_shape), tracer

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, text: torch.Tensor):
        """(latent or h, timestep, text) -> (h, timestep, text), or the velocity at the end."""
        with self.tracer.span("compute", "mb", batch=x.shape[0]):
            dtype = self.model.dtype  # activations in the model's dtype, latents fp32
            ctx = condition(self.model, (x.shape[0], *self.latent_shape[1:]), timestep,
                            text.to(dtype))
            h = embed_patches(self.model, x.to(dtype)) if self.first else x
            h = run_blocks(self.model, h, ctx, self.blocks)
            return epilogue(self.model, h, ctx) if self.last else (h, timestep, text)


def run_torch_gpipe(ctx, plan: LayerSplitPlan, model, tracer: Tracer) -> dict[int, torch.Tensor]:
    """All denoising steps of ``plan`` with ``PipelineStage`` + ``ScheduleGPipe`` (forward only).

    The plan must use every rank of the world, one chunk per rank, and no guidance."""
    # Imported when the baseline runs: the library's schedules cost an import nobody else pays.
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    p, rank = plan.num_stages, ctx.rank
    if ctx.placement.staged:
        raise ValueError("the torch.distributed.pipelining baseline moves device tensors with "
                         "its own P2P, which gloo cannot do for CUDA tensors: run it with a GPU "
                         "per rank (NCCL) or on CPU ranks")
    if p != ctx.world_size or plan.virtual != 1 or plan.sampling.uses_cfg or plan.solver != "euler":
        raise ValueError("the torch.distributed.pipelining baseline needs num_stages == "
                         "world_size, virtual=1, no guidance and ppdit's Euler")
    first, last = rank == 0, rank == p - 1
    stage_mod = WanStage(model, plan.chunks()[rank][0], first, last, plan.shape, tracer)
    stage = PipelineStage(stage_mod, rank, p, ctx.device)
    schedule = ScheduleGPipe(stage, n_microbatches=plan.micro_batches)
    den = plan_denoiser(model, plan)  # the shared update and conditioning
    timesteps, n = den.timesteps, len(plan.requests)
    latent = torch.cat([den.initial_state(r, plan.shape).latent for r in plan.requests])
    text = torch.cat([den.conditioning(r).text for r in plan.requests])
    with torch.no_grad():
        for step in range(plan.sampling.num_steps):
            if first and step > 0 and p > 1:
                with tracer.span("recv", "latents", step=step):
                    dist.recv(latent, p - 1)
            if first:
                # The library sends what it is given as is: a strided (expanded) tensor fails.
                out = schedule.step(latent, timesteps[step].repeat(n), text)
            else:
                out = schedule.step()
            if last:
                [state] = den.update([StepState(-1, step, latent)], out)
                latent = state.latent
                if step + 1 < plan.sampling.num_steps and p > 1:
                    with tracer.span("send", "latents", step=step):
                        dist.send(latent.contiguous(), 0)
    if not last:
        return {}
    return {r.request_id: x.unsqueeze(0) for r, x in zip(plan.requests, latent, strict=True)}
