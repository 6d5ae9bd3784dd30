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

from ppdit.runtime.comm.wire import PLAIN, Wire
from ppdit.sampler import guide


class CFGHalves:
    """The CFG-parallel policy a ``Denoiser`` calls for each guided step, so every loop runs it
    the same way (``sampler.predict_velocity``): this branch's half of the forward, whatever
    that forward is (whole, TP, sequence-parallel), the velocities exchanged, one guided ``v``."""

    def __init__(self, half: int, group=None, wire: Wire = PLAIN):
        if half not in (0, 1):
            raise ValueError(f"half={half} must be 0 (conditional) or 1 (unconditional)")
        self.half, self.group, self.wire = half, group, wire

    def __call__(self, forward, latent: torch.Tensor, timestep: torch.Tensor, cond,
                 guidance_scale: float) -> torch.Tensor:
        mine = forward(latent, timestep, cond.null_text if self.half else cond.text)
        both = self.wire.all_gather(mine.unsqueeze(0), self.group)  # [cond, uncond]: rank order
        return guide(both[0], both[1], guidance_scale)
