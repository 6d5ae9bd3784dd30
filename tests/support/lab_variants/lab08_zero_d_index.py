"""Lab 08 gone wrong: the schedule indexed with the 0-d step tensor itself.

It looks like device code, but PyTorch's indexing treats a 0-d integer tensor as a Python
integer: ``x[bufs.step]`` calls ``.item()`` on the index, a host sync hidden in a subscript.
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
    timestep = bufs.timesteps[bufs.step].expand(bufs.latent.shape[0])
    v = forward(bufs.latent, timestep, bufs.text)
    sigma, sigma_next = bufs.sigmas[bufs.step], bufs.sigmas[bufs.step + 1]
    return euler_update(bufs.latent, v, sigma, sigma_next, out=bufs.out)
