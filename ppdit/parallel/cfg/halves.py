"""CFG-parallel: each guided step's two forwards run at once, one per rank.

With guidance every step runs the DiT twice, on the prompt and on the negative prompt, and the
two forwards share nothing but the latent and the timestep::

    rank 0:  v_c = DiT(x, t, prompt)    ─┐ all-gather (one latent-sized tensor each way)
    rank 1:  v_u = DiT(x, t, negative)  ─┴─> both: v = v_u + g (v_c - v_u); x <- step(x, v)

Both ranks then run the same solver update on the same inputs, so they hold the same latent
(and solver memory) for the next step without sending it: the only traffic is the exchange of
the two velocities, ``2 x latent bytes`` per step. Each rank's forward has exactly the shapes
of the single-device forward (batch 1), so the result equals one device bit for bit; the step
takes about one forward instead of two (the all-gather and the update are small).
Compare: batching both halves on one device (ppdit's ``predict_velocity``) buys GEMM
efficiency, not latency, and changes the bits.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ppdit.sampler import guide


def exchange_halves(mine: torch.Tensor, half: int, group=None, staged: bool = False
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """All-gather the two ranks' velocities; returns (v_cond, v_uncond) on every rank.

    ``half`` is this rank's half (0: conditional, 1: unconditional); ``staged`` exchanges host
    copies (gloo between ranks that share a GPU moves host memory only).
    """
    if half not in (0, 1):
        raise ValueError(f"half={half} must be 0 (conditional) or 1 (unconditional)")
    wire = mine.detach().to("cpu") if staged else mine.contiguous()
    both = [torch.empty_like(wire) for _ in range(2)]
    dist.all_gather(both, wire, group=group)  # rank order = half order: [v_cond, v_uncond]
    v_cond, v_uncond = (b.to(mine.device) for b in both)
    return v_cond, v_uncond


def cfg_parallel_velocity(forward, latent: torch.Tensor, timestep: torch.Tensor,
                          texts: tuple[torch.Tensor, torch.Tensor], guidance_scale: float,
                          half: int, group=None, staged: bool = False) -> torch.Tensor:
    """This rank's half of the forward, exchanged, guided: the same ``v`` on both ranks."""
    mine = forward(latent, timestep, texts[half])
    v_cond, v_uncond = exchange_halves(mine, half, group, staged)
    return guide(v_cond, v_uncond, guidance_scale)


def cfg_parallel_step(den, state, cond, half: int, group=None, staged: bool = False):
    """One step of a ``Denoiser``'s request with this rank's half of the guided forward: the
    velocities exchanged, then the solver update every rank applies alike."""
    t = den.timesteps[state.step_index].expand(state.latent.shape[0])
    v = cfg_parallel_velocity(den.forward, state.latent, t, (cond.text, cond.null_text),
                              den.sampling.guidance_scale, half, group, staged)
    return den.update([state], v)[0]


__all__ = ["cfg_parallel_step", "cfg_parallel_velocity", "exchange_halves"]
