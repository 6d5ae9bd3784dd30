"""The report's "memory optimisations give modest improvements", taken apart term by term.

The report (``002``) turned on fused ("flash") attention, half precision and gradient
checkpointing before splitting its model, and found they helped a little but did not make it
fit one 24 GB GPU. For a video DiT each does something different:

* **fused attention** removes the per-head S x S scores and softmax output, ``2 b H S^2``
  elements at softmax's high point (``scores_bytes``): 343 GB in bf16 at Wan 14B 480p
  (S = 32,760, 40 heads, both halves). Without it nothing runs: its gain is not modest.
* **half precision** halves the weights and the activations (bf16 or fp16 against fp32).
* **gradient checkpointing** keeps fewer activations *for the backward pass*; inference under
  ``torch.no_grad`` keeps none, so it saves nothing here."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from ppdit.analysis.memory_model import rank_memory_model
from ppdit.analysis.roofline import DTYPE_BYTES
from ppdit.model import build_model
from ppdit.presets import ModelPreset, get_preset
from ppdit.runtime.observe.memory import track_peak_memory
from ppdit.sampler import Request, initial_noise, prompt_embeddings


def scores_bytes(preset: str | ModelPreset, latent_shape: tuple[int, ...] | None = None, *,
                 dtype: str = "bf16", batch: int = 2) -> float:
    """The scores and softmax's output, (batch, heads, S, S) each: an unfused attention's high
    point above the fused one."""
    p = get_preset(preset)
    s = p.num_tokens(latent_shape)
    return 2 * batch * p.num_heads * s * s * DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class Rung:
    """One GPU's need with the optimisations switched on so far."""
    name: str
    bytes: float

    def fits(self, capacity_gb: float) -> bool:
        return self.bytes <= capacity_gb * 1e9


def optimisation_ladder(preset: str | ModelPreset,
                        latent_shape: tuple[int, ...] | None = None) -> list[Rung]:
    """One GPU, both guidance halves batched: fp32 with unfused attention, then fused attention,
    then bf16, then gradient checkpointing (no change at inference)."""
    def need(dtype: str, fused: bool) -> float:
        m = rank_memory_model(preset, latent_shape=latent_shape, dtype=dtype)
        extra = 0.0 if fused else scores_bytes(preset, latent_shape, dtype=dtype)
        return m.weights + m.text_encoder + max(m.run_peak + extra, m.vae_peak)

    fused_bf16 = need("bf16", True)
    return [Rung("fp32, unfused attention", need("fp32", False)),
            Rung("+ fused (flash) attention", need("fp32", True)),
            Rung("+ bf16", fused_bf16),
            Rung("+ gradient checkpointing (inference: nothing to save)", fused_bf16)]


def measure_scores(preset: str = "tiny", *, batch: int = 2, seed: int = 0) -> dict[str, float]:
    """One fp32 forward of ``preset`` (``batch`` samples) with the fused kernel and with the
    unfused "math" attention, peak live-tensor bytes of each, and ``scores_bytes``'s
    prediction of their difference. The difference is the scores less whatever the fused
    forward's own high point (the FFN) holds above the attention's: on ``tiny`` the scores
    dominate (S = 320), on presets with a wide FFN and short sequences they need not."""
    p = get_preset(preset)
    model = build_model(p, seed=seed)
    shape = (batch, *p.latent_shape[1:])
    latent = initial_noise(Request(0, seed), shape)
    text = prompt_embeddings(Request(0, seed), p, batch=batch)
    t = torch.full((batch,), 500.0)
    peaks = {}
    for name, backend in (("fused", SDPBackend.FLASH_ATTENTION), ("math", SDPBackend.MATH)):
        with torch.no_grad(), sdpa_kernel(backend), track_peak_memory() as mem:
            model(latent, t, text, return_dict=False)
        peaks[name] = float(mem.peak_bytes)
    return {**peaks, "predicted": scores_bytes(p, shape, dtype="fp32", batch=batch)}
