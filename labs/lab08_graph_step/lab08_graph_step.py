"""Lab 08: a denoising step that a CUDA graph can capture and replay (see README.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ppdit.sampler import Conditioning, euler_update, predict_velocity


@dataclass(frozen=True)
class StaticBuffers:
    """The memory a captured step reads and writes, allocated once before capture.

    A graph remembers addresses, not Python names, so these tensors are the step's whole
    interface: the caller copies each step's inputs *into* them and reads the result from
    ``out``. Frozen, so that a field cannot be rebound to another tensor by mistake.
    """

    latent: torch.Tensor  # (B, C, F, H, W) x at sigmas[step]
    step: torch.Tensor  # 0-d int64: which step this is, as a tensor (never a Python int)
    text: torch.Tensor  # (B, text_len, text_dim) the prompt embedding
    timesteps: torch.Tensor  # (num_steps,) float32: the model's timestep input of each step
    sigmas: torch.Tensor  # (num_steps + 1,) float32: the noise levels, ending with 0
    out: torch.Tensor  # (B, C, F, H, W) written by the step: x at sigmas[step + 1]


def graph_step(forward: Callable[..., torch.Tensor], bufs: StaticBuffers) -> torch.Tensor | None:
    """One Euler step of ``forward`` (``forward(latent, timestep, text) -> velocity``, timestep
    of shape (B,)) from ``bufs``' inputs into ``bufs.out``; returns ``bufs.out`` or None.

    Capture-safe: no host syncs, no Python decisions on tensor values, the same operators for
    every step, inputs left untouched.
    """
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 08: write graph_step")
    # END YOUR SOLUTION


__all__ = ["Conditioning", "StaticBuffers", "euler_update", "graph_step", "predict_velocity"]
