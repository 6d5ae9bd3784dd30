"""Lab 02: one stage of a step-split pipeline (see README.md)."""

from __future__ import annotations

import torch

from ppdit.model import build_model
from ppdit.runtime.comm.wire import recv_tensor, send_tensor
from ppdit.sampler import Denoiser, StepState

SHAPE = (1, 16, 5, 16, 16)  # the tiny preset's latent


def stage_worker(ctx, stages, sampling, requests) -> dict[int, torch.Tensor]:
    """Run this rank's steps for every request; the last stage returns the final latents."""
    model = build_model("tiny", seed=0)
    den = Denoiser(model, "tiny", sampling)
    steps = stages[ctx.rank]
    out: dict[int, torch.Tensor] = {}
    for request in requests:
        # BEGIN YOUR SOLUTION
        raise NotImplementedError("lab 02: receive, run your steps, send")
        # END YOUR SOLUTION
    return out


__all__ = ["SHAPE", "Denoiser", "StepState", "recv_tensor", "send_tensor", "stage_worker"]
