"""CFG-parallel: each guided step's two forwards run at once, one per rank.

With guidance every step runs the DiT twice, on the prompt and the negative prompt, two
forwards that share nothing but the latent and the timestep::

    rank 0:  v_c = DiT(x, t, prompt)    ─┐ all-gather (one latent-sized tensor each way)
    rank 1:  v_u = DiT(x, t, negative)  ─┴─> both: v = v_u + g (v_c - v_u); x <- step(x, v)

Both ranks run the same update on the same inputs, so they hold the same latent (and solver
memory) without sending it: the only traffic is ``2 x latent bytes`` per step. Each forward has
the single device's shapes (batch 1), so the result equals it bit for bit, at about one
forward's time instead of two. Batching both halves on one device (``predict_velocity``) buys
GEMM efficiency, not latency, and changes the bits.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ppdit.sampler import guide


class CFGHalves:
    """The CFG-parallel policy a ``Denoiser`` calls for each guided step, so every loop runs it
    the same way (``sampler.predict_velocity``): this branch's half of the forward, whatever
    that forward is (whole, TP, sequence-parallel), the velocities exchanged, one guided ``v``."""

    def __init__(self, half: int, group=None, staged: bool = False):
        if half not in (0, 1):
            raise ValueError(f"half={half} must be 0 (conditional) or 1 (unconditional)")
        self.half, self.group, self.staged = half, group, staged

    def __call__(self, forward, latent: torch.Tensor, timestep: torch.Tensor, cond,
                 guidance_scale: float) -> torch.Tensor:
        mine = forward(latent, timestep, cond.null_text if self.half else cond.text)
        wire = mine.detach().to("cpu") if self.staged else mine.contiguous()  # gloo: host only
        both = [torch.empty_like(wire) for _ in range(2)]
        dist.all_gather(both, wire, group=self.group)  # rank order = half order: [cond, uncond]
        return guide(*(b.to(mine.device) for b in both), guidance_scale)
