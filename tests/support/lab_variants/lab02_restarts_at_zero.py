"""Lab 02 gone wrong: the receiving stage starts its steps from step 0, not where the sender
stopped (it steps by hand, so ``Denoiser.run``'s own guard never sees the state)."""

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
            rid, _step = recv_tensor(ctx.rank - 1, ctx.wire).tolist()
            state = StepState(rid, 0, recv_tensor(ctx.rank - 1, ctx.wire))  # the bug: step 0
        for _ in steps:
            state = den.step(state, request)
        if ctx.rank == len(stages) - 1:
            out[request.request_id] = state.latent
        else:
            send_tensor(torch.tensor([state.request_id, state.step_index]), ctx.rank + 1, ctx.wire)
            send_tensor(state.latent, ctx.rank + 1, ctx.wire)
    return out
