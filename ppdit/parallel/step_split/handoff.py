"""What a step-split handoff carries, in one frame: the group's latents and, for a multistep
solver (a pipeline folder's UniPC), its memory of earlier steps.

::

    frame payload (slots, B, C, F, H, W):   [0] latents   [1..] the memory's latent-sized
                                            tensors (UniPC: 2 model outputs, last sample)
                                            [then] a step cache's residuals, flattened into
                                            latent-sized slots (``plan.cache_slots``; B = 1)
    frame metadata:  first request id, step index | the memory's counters | which tensors
                     are present (early in the warm-up some are not: sent as zeros) | the
                     cache's expert and which of its two branches are present

Every request of a group sits at the same step, so the counters and the presence flags are the
group's (they depend on the step alone); the tensors are per request, stacked along B.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from ppdit.checkpoint.solver import SchedulerSolver
from ppdit.parallel.step_split.plan import CACHE_META, CACHE_TENSORS
from ppdit.sampler import Request, StepState


def pack(solver: SchedulerSolver | None, states: Sequence[StepState], frame: torch.Tensor,
         cache_slots: int = 0) -> list[int]:
    """Write the group's latents (unless already there), memory and the last ``cache_slots``
    slots' cache state into ``frame``: its metadata."""
    latent = states[0].latent if len(states) == 1 else torch.cat([s.latent for s in states])
    if latent.data_ptr() != frame[0].data_ptr():
        frame[0].copy_(latent)
    meta = [states[0].request_id, states[0].step_index]
    tail = _pack_cache(states[0].cache_state, frame[len(frame) - cache_slots:]) \
        if cache_slots else []
    if solver is None:
        return meta + tail
    wired = [solver.to_wire(s.solver_state) for s in states]
    tensors, ints = wired[0]
    for k in range(len(tensors)):
        if tensors[k] is None:
            frame[1 + k].zero_()
        else:
            torch.cat([w[0][k] for w in wired], out=frame[1 + k])
    return meta + ints + [int(t is not None) for t in tensors] + tail


def unpack(solver: SchedulerSolver | None, frame: torch.Tensor, meta: Sequence[int],
           group: Sequence[Request], cache: tuple[int, tuple[int, ...], torch.dtype] | None = None
           ) -> list[StepState]:
    """The group's ``StepState``s from an arrived frame and its metadata (``cache``: the cache
    state's slots, tensor shape and dtype, as ``plan.cache_slots`` says)."""
    step = meta[1]
    latents = frame[0].chunk(len(group))
    if cache is not None:  # one request (caching runs micro_batch 1)
        state = _unpack_cache(frame[len(frame) - cache[0]:], meta[-CACHE_META:], *cache[1:])
        meta = meta[:-CACHE_META]
    if solver is None:
        out = [StepState(r.request_id, step, x) for r, x in zip(group, latents, strict=True)]
        return out if cache is None else [replace(out[0], cache_state=state)]
    n = solver.wire_tensors
    ints = list(meta[2:len(meta) - n])
    present = meta[len(meta) - n:]
    slots = [frame[1 + k].chunk(len(group)) if present[k] else [None] * len(group)
             for k in range(n)]
    out = [StepState(r.request_id, step, latents[j],
                     solver.from_wire(step, [s[j] for s in slots], ints))
           for j, r in enumerate(group)]
    return out if cache is None else [replace(out[0], cache_state=state)]


def _pack_cache(state: tuple[int, dict] | None, region: torch.Tensor) -> list[int]:
    """(expert, {(expert, branch): (head, rest)}) into ``region``'s slots, tensor k in its
    k-th quarter; metadata: the expert, then whether each branch is present."""
    expert, entries = state if state is not None else (0, {})
    quarters = region.view(CACHE_TENSORS, -1)
    present = []
    for branch in range(CACHE_TENSORS // 2):
        pair = entries.get((expert, branch))
        present.append(int(pair is not None))
        for j, t in enumerate(pair or ()):
            quarters[2 * branch + j, :t.numel()].copy_(t.reshape(-1))
    return [expert, *present]


def _unpack_cache(region: torch.Tensor, meta: Sequence[int], shape: tuple[int, ...],
                  dtype: torch.dtype) -> tuple[int, dict]:
    expert, present = meta[0], meta[1:]
    quarters, n = region.view(CACHE_TENSORS, -1), torch.Size(shape).numel()
    return expert, {(expert, b): tuple(quarters[2 * b + j, :n].view(shape).to(dtype, copy=True)
                                       for j in range(2))
                    for b in range(CACHE_TENSORS // 2) if present[b]}
