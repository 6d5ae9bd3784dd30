"""Lab 08 gone wrong: the step read into a Python int to index the schedule on the host.

``int(bufs.step)`` is a host sync: on a GPU the host waits for the device to copy the value
back, and while a stream captures there is no value to copy, so the capture fails. Every
number it computes eagerly is right, which is why only a capture (or the checker) notices.
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
    i = int(bufs.step)  # a Python int, easy to index the schedule with
    timestep = bufs.timesteps[i].expand(bufs.latent.shape[0])
    v = forward(bufs.latent, timestep, bufs.text)
    return euler_update(bufs.latent, v, bufs.sigmas[i].view(1), bufs.sigmas[i + 1].view(1),
                        out=bufs.out)
