"""Lab 08 gone wrong: a Python branch on the step's value.

The last step lands on sigma = 0, where x + (0 - sigma) v is the clean estimate x - sigma v; this
step takes that shortcut on the last step only. The numbers are right on every step, eagerly.
A capture, though, takes the branch once: a graph recorded on an earlier step replays the
general update on the last step, and one recorded on the last step replays the shortcut on
every step.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ppdit.sampler import euler_update
from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab08_graph_step_solution.py")
StaticBuffers = _solution.StaticBuffers


@torch.no_grad()
def graph_step(forward, bufs):
    idx = bufs.step.view(1)
    v = forward(bufs.latent, bufs.timesteps[idx].expand(bufs.latent.shape[0]), bufs.text)
    sigma = bufs.sigmas[idx]
    if bool(bufs.step == bufs.timesteps.numel() - 1):  # the last step: sigma_next is 0
        return torch.sub(bufs.latent, sigma.view(-1, 1, 1, 1, 1) * v, out=bufs.out)
    return euler_update(bufs.latent, v, sigma, bufs.sigmas[idx + 1], out=bufs.out)
