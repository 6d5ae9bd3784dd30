"""The streaming VAE at its real size: the Wan 2.1 VAE config at 480p, on one GPU.

Random weights (no checkpoint is downloaded) in fp32, as diffusers runs Wan's VAE; the latent
is (1, 16, 21, 60, 104), the 480p x 81-frame video of the DiT. Measured: time to the first frame
of a stream (one latent frame per push) against the full decode, that the stream equals the
full decode bit for bit, and the peak memory of each (notebook 09 makes the same measurements
with a tiny VAE on the CPU).
"""

from __future__ import annotations

import torch

from ppdit.analysis.roofline import latent_for
from ppdit.analysis.vae_decode import peak_bytes, time_full, time_stream
from ppdit.gpu_check.sections import free_gb, sig
from ppdit.runtime.device import Placement
from ppdit.vae.presets import build_vae
from ppdit.vae.streaming import decode_full, decode_streaming

# The full decode's peak at this size was 14.2 GB on an H100 (issue 14); below this much free
# memory the section is skipped with the reason instead of failing half-way.
NEEDS_GB = 16.0


def streaming_vae(placement: Placement, latent_shape: tuple[int, ...] | None = None, *,
                  preset: str = "wan2.1", needs_gb: float = NEEDS_GB) -> dict:
    """First frame vs full decode (ms), bitwise equality, peaks (GB) of both decodes.
    (``preset``, ``latent_shape`` and ``needs_gb`` let a test run it small.)"""
    shape = tuple(latent_shape or latent_for("480p", 81))
    config = "the real Wan 2.1 VAE config" if preset == "wan2.1" else f"the {preset} VAE"
    about = {"config": f"{config}, random weights", "dtype": "fp32", "latent_shape": list(shape)}
    if free_gb() < needs_gb:
        return {**about, "status": "skipped", "reason": f"needs about {needs_gb:.0f} GB of free "
                f"GPU memory, {free_gb():.1f} GB free"}
    vae = build_vae(preset, seed=0, device=placement.device)
    z = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(placement.device)
    # The first run of each is the warm-up (allocator growth, kernel choice) and the equality
    # check at once: the bit patterns are compared, so even a NaN must match.
    full = decode_full(vae, z)
    streamed = decode_streaming(vae, z, chunk_frames=1)
    bitwise = full.shape == streamed.shape and torch.equal(full.view(torch.int32),
                                                           streamed.view(torch.int32))
    del full, streamed
    full_s, _ = time_full(vae, z, placement)
    first_s, stream_s = time_stream(vae, z, 1, placement)
    peaks = [{"mode": "full", "gb": sig(peak_bytes(vae, z, None, placement) / 1e9, 3)},
             {"mode": "stream", "gb": sig(peak_bytes(vae, z, 1, placement) / 1e9, 3)}]
    return {**about, "first_frame_ms": sig(first_s * 1e3), "full_ms": sig(full_s * 1e3),
            "stream_total_ms": sig(stream_s * 1e3), "bitwise_equal": bool(bitwise), "peaks": peaks}
