"""Lab 08 gone wrong: the step returns a new tensor instead of writing into ``bufs.out``.

Eagerly nothing is wrong with it. Replayed, a graph writes where the recorded call wrote: into
memory of the graph's own pool that the caller has no name for, and that the next replay
overwrites, while ``bufs.out`` keeps whatever it held before.
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
    return euler_update(bufs.latent, v, bufs.sigmas[idx], bufs.sigmas[idx + 1])
