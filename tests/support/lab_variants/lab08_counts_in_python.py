"""Lab 08 gone wrong: the step counted on the host, to avoid reading ``bufs.step``.

It has no host sync and dispatches the same operators on every step, and eagerly, called once
per step in order, its numbers are right. But the counter is Python: a capture records the
schedule lookup at the index the counter had then, and every replay repeats that step's
timestep and sigmas, whatever ``bufs.step`` holds.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ppdit.sampler import euler_update
from ppdit.teaching.labkit import load_module

_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab08_graph_step_solution.py")
StaticBuffers = _solution.StaticBuffers
_calls = 0  # steps run so far, kept on the host


@torch.no_grad()
def graph_step(forward, bufs):
    global _calls
    i = _calls % bufs.timesteps.numel()  # no .item(): the host already knows which step
    _calls += 1
    sl = slice(i, i + 1)  # (1,) views of the schedule
    v = forward(bufs.latent, bufs.timesteps[sl].expand(bufs.latent.shape[0]), bufs.text)
    return euler_update(bufs.latent, v, bufs.sigmas[sl], bufs.sigmas[i + 1:i + 2],
                        out=bufs.out)
