"""What a step-split handoff carries, in one frame: the group's latents and, for a multistep
solver (a pipeline folder's UniPC), its memory of earlier steps.

::

    frame payload (slots, B, C, F, H, W):   [0] latents   [1..] the memory's latent-sized
                                            tensors (UniPC: 2 model outputs, last sample)
    frame metadata:  first request id, step index | the memory's counters | which tensors
                     are present (early in the warm-up some are not: sent as zeros)

Every request of a group sits at the same step, so the counters and the presence flags are the
group's (they depend on the step alone); the tensors are per request, stacked along B.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ppdit.checkpoint.solver import SchedulerSolver
from ppdit.sampler import Request, StepState


def pack(solver: SchedulerSolver | None, states: Sequence[StepState], frame: torch.Tensor
         ) -> list[int]:
    """Write the group's latents (unless already there) and memory into ``frame``: its metadata."""
    latent = states[0].latent if len(states) == 1 else torch.cat([s.latent for s in states])
    if latent.data_ptr() != frame[0].data_ptr():
        frame[0].copy_(latent)
    meta = [states[0].request_id, states[0].step_index]
    if solver is None:
        return meta
    wired = [solver.to_wire(s.solver_state) for s in states]
    tensors, ints = wired[0]
    for k in range(len(tensors)):
        if tensors[k] is None:
            frame[1 + k].zero_()
        else:
            torch.cat([w[0][k] for w in wired], out=frame[1 + k])
    return meta + ints + [int(t is not None) for t in tensors]


def unpack(solver: SchedulerSolver | None, frame: torch.Tensor, meta: Sequence[int],
           group: Sequence[Request]) -> list[StepState]:
    """The group's ``StepState``s from an arrived frame and its metadata."""
    step = meta[1]
    latents = frame[0].chunk(len(group))
    if solver is None:
        return [StepState(r.request_id, step, x) for r, x in zip(group, latents, strict=True)]
    n = solver.wire_tensors
    ints = list(meta[2:len(meta) - n])
    present = meta[len(meta) - n:]
    slots = [frame[1 + k].chunk(len(group)) if present[k] else [None] * len(group)
             for k in range(n)]
    return [StepState(r.request_id, step, latents[j],
                      solver.from_wire(step, [s[j] for s in slots], ints))
            for j, r in enumerate(group)]
