"""Reference solution of lab 08."""

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


@torch.no_grad()
def graph_step(forward: Callable[..., torch.Tensor], bufs: StaticBuffers) -> torch.Tensor | None:
    """One Euler step of ``forward`` (``forward(latent, timestep, text) -> velocity``, timestep
    of shape (B,)) from ``bufs``' inputs into ``bufs.out``; returns ``bufs.out`` or None.

    Capture-safe: no host syncs, no Python decisions on tensor values, the same operators for
    every step, inputs left untouched.
    """
    batch = bufs.latent.shape[0]  # a shape is known on the host: reading it syncs nothing
    # A 1-element index tensor, not the 0-d one: x[zero_d_int] calls .item() on the index
    # inside PyTorch's indexing (a host sync); x[one_elem] is aten.index, a device op.
    idx = bufs.step.view(1)
    timestep = bufs.timesteps[idx].expand(batch)  # (B,): every sample at the same step
    v = predict_velocity(forward, bufs.latent, timestep, Conditioning(bufs.text, None), 1.0)
    # sigma and sigma_next are (1,) tensors; euler_update broadcasts them over the batch and
    # writes x + (sigma_next - sigma) v into the static output: Denoiser.step's kernels.
    return euler_update(bufs.latent, v, bufs.sigmas[idx], bufs.sigmas[idx + 1], out=bufs.out)
