"""diffusers' own context parallelism for Wan, side by side with ppdit's Ulysses.

The pinned diffusers ships ``ContextParallelConfig(ulysses_degree=, ring_degree=)`` and a
``_cp_plan`` for ``WanTransformer3DModel``: hooks split the hidden states (and RoPE) by tokens
before the first block, every attention runs its Ulysses all-to-alls (or ring), and the output
is gathered after ``proj_out``. It is the reference a user would compare ppdit with. Two things
stand in its way on CPU ranks:

* it picks each rank's device as ``rank % torch.accelerator.device_count()``, which is 0 on a
  CPU build (a division by zero): ``enable_parallelism`` runs here with the count patched to 1;
* its ring needs each block's log-sum-exp, which only its CUDA flash backends return
  (``Native attention does not support return_lse=True``): ring is compared on GPUs only.
  ppdit's ring (``ring.py``) takes the log-sum-exp from PyTorch's CPU flash kernel.

``compare_worker`` runs one forward both ways on the same weights and inputs, interleaved
round by round, and returns both outputs (for the equality check) and their times. A model with
a timestep per token (Wan 2.2 TI2V) gets the image's frame at t = 0: diffusers' plan splits the
(B, S) timestep by tokens, ppdit shards the modulation built from (B, F) with its tokens.
"""

from __future__ import annotations

from unittest import mock

import torch
import torch.distributed as dist

from ppdit.model import build_model
from ppdit.parallel.sequence.comms import even_split
from ppdit.parallel.sequence.ulysses import install_ulysses, sp_forward
from ppdit.presets import get_preset
from ppdit.runtime.observe.timing import MIN_ROUNDS, timed
from ppdit.runtime.processes.rank import RankContext
from ppdit.sampler import Request, frame_timesteps, initial_noise, prompt_embeddings


def enable_diffusers_cp(model, ulysses: int = 1, ring: int = 1) -> None:
    """diffusers' ``enable_parallelism`` with a ``ContextParallelConfig`` (CPU ranks: the
    device count patched, see the module docstring)."""
    from diffusers import ContextParallelConfig

    config = ContextParallelConfig(ulysses_degree=ulysses, ring_degree=ring)
    if torch.accelerator.device_count() > 0:
        model.enable_parallelism(config=config)
        return
    with mock.patch.object(torch.accelerator, "device_count", return_value=1):
        model.enable_parallelism(config=config)


@torch.no_grad()
def compare_worker(ctx: RankContext, preset: str, latent_shape: tuple[int, ...],
                   rounds: int = MIN_ROUNDS) -> dict:
    """One forward with diffusers' Ulysses and with ppdit's, on every rank of the world."""
    world = dist.get_world_size()
    theirs = build_model(preset).to(ctx.device)
    ours = build_model(preset).to(ctx.device)
    request = Request(0, 0)
    latent = initial_noise(request, latent_shape).to(ctx.device)
    text = prompt_embeddings(request, preset).to(ctx.device)
    t = ours_t = torch.tensor([500.0], device=ctx.device)
    if get_preset(preset).expand_timesteps:  # (B, F) for ppdit, (B, S) as WanPipeline passes
        f, tokens_per_frame = latent_shape[2], latent_shape[3] * latent_shape[4] // 4
        ours_t = frame_timesteps(t, f)
        t = ours_t[:, :, None].expand(-1, f, tokens_per_frame).flatten(1)
    one = theirs(latent, t, text, return_dict=False)[0]  # one device, before any hook
    enable_diffusers_cp(theirs, ulysses=world)
    split = even_split(get_preset(preset).num_tokens(latent_shape), world)
    group = dist.group.WORLD
    install_ulysses(ours, group, split, v_first=True)

    def diffusers_step():
        return theirs(latent, t, text, return_dict=False)[0]

    def ppdit_step():
        return sp_forward(ours, latent, ours_t, text, group=group, split=split)

    steps = {"diffusers": diffusers_step, "ppdit": ppdit_step}
    for step in steps.values():
        step()  # warm-up: first calls pay allocations and the groups' first messages
    times = {name: [] for name in steps}
    for _ in range(rounds):  # interleaved: the same machine state for both
        for name, step in steps.items():
            with timed(ctx.placement) as clock:
                step()
            times[name].append(clock.seconds)
    return {"one": one.cpu(), "diffusers": diffusers_step().cpu(), "ppdit": ppdit_step().cpu(),
            "seconds": times}


__all__ = ["compare_worker", "enable_diffusers_cp"]
