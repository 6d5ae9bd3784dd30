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

from ppdit.model import condition, embed_patches, epilogue, run_blocks
from ppdit.parallel.layer_schedule import LayerSplitPlan
from ppdit.runtime.trace import Tracer
from ppdit.sampler import euler_update, initial_noise, prompt_embeddings


class WanStage(nn.Module):
    """One pipeline stage as the library wants it: tensors in, tensors out."""

    def __init__(self, model, blocks: range, first: bool, last: bool, latent_shape, tracer):
        super().__init__()
        self.model, self.blocks, self.first, self.last = model, blocks, first, last
        self.latent_shape, self.tracer = tuple(latent_shape), tracer

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, text: torch.Tensor):
        """(latent or h, timestep, text) -> (h, timestep, text), or the velocity at the end."""
        with self.tracer.span("compute", "mb", batch=x.shape[0]):
            ctx = condition(self.model, (x.shape[0], *self.latent_shape[1:]), timestep, text)
            h = embed_patches(self.model, x) if self.first else x
            h = run_blocks(self.model, h, ctx, self.blocks)
            return epilogue(self.model, h, ctx) if self.last else (h, timestep, text)


def run_torch_gpipe(ctx, plan: LayerSplitPlan, model, tracer: Tracer) -> dict[int, torch.Tensor]:
    """All denoising steps of ``plan`` with ``PipelineStage`` + ``ScheduleGPipe`` (forward only).

    The plan must use every rank of the world, one chunk per rank, and no guidance.
    """
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    p, rank = plan.num_stages, ctx.rank
    if p != ctx.world_size or plan.virtual != 1 or plan.sampling.uses_cfg:
        raise ValueError("the torch.distributed.pipelining baseline needs num_stages == "
                         "world_size, virtual=1 and no guidance")
    first, last = rank == 0, rank == p - 1
    stage_mod = WanStage(model, plan.chunks()[rank][0], first, last, plan.shape, tracer)
    stage = PipelineStage(stage_mod, rank, p, ctx.device)
    schedule = ScheduleGPipe(stage, n_microbatches=plan.micro_batches)
    s = plan.sampling
    sigmas, timesteps = s.sigmas().to(ctx.device), s.timesteps().to(ctx.device)
    n = len(plan.requests)
    latent = torch.cat([initial_noise(r, plan.shape) for r in plan.requests]).to(ctx.device)
    text = torch.cat([prompt_embeddings(r, plan.preset) for r in plan.requests]).to(ctx.device)
    with torch.no_grad():
        for step in range(s.num_steps):
            if first and step > 0 and p > 1:
                with tracer.span("recv", "latents", step=step):
                    dist.recv(latent, p - 1)
            if first:
                # The library sends what it is given as is: a strided (expanded) tensor fails.
                out = schedule.step(latent, timesteps[step].repeat(n), text)
            else:
                out = schedule.step()
            if last:
                latent = euler_update(latent, out, sigmas[step].expand(n),
                                      sigmas[step + 1].expand(n))
                if step + 1 < s.num_steps and p > 1:
                    with tracer.span("send", "latents", step=step):
                        dist.send(latent.contiguous(), 0)
    if not last:
        return {}
    return {r.request_id: x.unsqueeze(0) for r, x in zip(plan.requests, latent, strict=True)}
