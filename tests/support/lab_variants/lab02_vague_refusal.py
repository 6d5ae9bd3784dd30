"""Lab 02 gone half right: the step travels with the latent and a mismatch is refused, but the
refusal says only "wrong step", not which: the one that arrived, or the one the stage expected.
A person reading the log learns nothing they can act on (and the old check, the word "step"
anywhere in rank 1's error, took it)."""

from __future__ import annotations

import torch

from ppdit.model import build_model
from ppdit.runtime.comm.wire import recv_tensor, send_tensor
from ppdit.sampler import Denoiser, StepState

SHAPE = (1, 16, 5, 16, 16)


def stage_worker(ctx, stages, sampling, requests) -> dict[int, torch.Tensor]:
    """Run this rank's steps for every request; the last stage returns the final latents."""
    model = build_model("tiny", seed=0)
    den = Denoiser(model, "tiny", sampling)
    steps = stages[ctx.rank]
    last = ctx.rank == len(stages) - 1
    out: dict[int, torch.Tensor] = {}
    for request in requests:
        if ctx.rank == 0:
            state = den.initial_state(request, SHAPE)
        else:
            rid, step = recv_tensor(ctx.rank - 1, ctx.wire).tolist()
            if (rid, step) != (request.request_id, steps.start):
                raise RuntimeError("wrong step: refusing the handoff")
            state = StepState(rid, step, recv_tensor(ctx.rank - 1, ctx.wire))
        [state] = den.run([state], [request], steps)
        if last:
            out[request.request_id] = state.latent
        else:
            send_tensor(torch.tensor([state.request_id, state.step_index]), ctx.rank + 1, ctx.wire)
            send_tensor(state.latent, ctx.rank + 1, ctx.wire)
    return out
