"""Lab 02 gone wrong: the receiver never learns the sender's step; it trusts its own plan.

With the plans every rank agrees on this is right — which is why the bug hides. The checker
hands rank 1 a plan one step off and expects a refusal; this stage runs on silently.
"""

from __future__ import annotations

import torch

from ppdit.model import build_model
from ppdit.runtime.comm.wire import recv_tensor, send_tensor
from ppdit.sampler import Denoiser, StepState

SHAPE = (1, 16, 5, 16, 16)


def stage_worker(ctx, stages, sampling, requests) -> dict[int, torch.Tensor]:
    den = Denoiser(build_model("tiny", seed=0), "tiny", sampling)
    steps = stages[ctx.rank]
    out: dict[int, torch.Tensor] = {}
    for request in requests:
        if ctx.rank == 0:
            state = den.initial_state(request, SHAPE)
        else:
            state = StepState(request.request_id, steps.start, recv_tensor(ctx.rank - 1, ctx.wire))
        [state] = den.run([state], [request], steps)
        if ctx.rank == len(stages) - 1:
            out[request.request_id] = state.latent
        else:
            send_tensor(state.latent, ctx.rank + 1, ctx.wire)
    return out
