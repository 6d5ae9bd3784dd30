"""Streaming causal decode of the Wan VAE (``diffusers.AutoencoderKLWan``, 2.1 or 2.2) and its
reference.

Why streaming works: every temporal conv in Wan's decoder is *causal* (output frame t reads
frames t-2..t), so the decoder can run a latent frame at a time if each causal conv keeps its
last ``CACHE_T = 2`` input frames. ``AutoencoderKLWan._decode`` does that (``feat_cache``, with
a cursor ``feat_idx``) but clears the cache on every ``decode`` call, so nothing streams
*across* calls. ``StreamingDecoder`` owns its cache list and feeds ``vae.decoder`` with it::

    latent frames   z0 │ z1      z2      z3        (one push per chunk; the first is z0 alone)
    pixel frames    x0 │ x1..x4  x5..x8  x9..x12   1 + 4·(F − 1) frames for F latent frames
    feat_cache      [c_0, c_1, ..., c_{N-1}]      one slot per causal conv: its last 2 inputs

Frame arithmetic: the decoder upsamples time twice by 2, but the first latent frame is an image:
the temporal upsamplers skip it (cache slot ``"Rep"``), so it decodes to **one** frame, every
later one to **4**. A first chunk of several frames would skip the upsampling for all of them,
so the first push after a start or ``reset()`` must be one latent frame; later ones any number.

Equality: one latent frame per push runs ``decode``'s very kernels on the same inputs: bitwise
equal to ``decode_full``. A chunk of k > 1 frames runs each conv over k frames at once (fewer,
larger kernels); the summation order differs, so it agrees to rounding (``CHUNKED_TOL``).
Presets: ``ppdit.vae.presets``; measurements: ``analysis.vae_decode``; pictures: ``viz.vae``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from diffusers import AutoencoderKLWan
from diffusers.models.autoencoders.autoencoder_kl_wan import WanCausalConv3d, unpatchify


def output_frames(latent_frames: int, factor: int = 4) -> int:
    """Pixel frames decoded from ``latent_frames`` latent frames: ``1 + factor·(F − 1)``."""
    if latent_frames < 1:
        raise ValueError(f"latent_frames={latent_frames} must be >= 1")
    return 1 + factor * (latent_frames - 1)


@torch.no_grad()
def decode_full(vae: AutoencoderKLWan, latents: torch.Tensor) -> torch.Tensor:
    """The reference: diffusers' own ``decode`` of the whole latent at once, (B, 3, T, H, W),
    clamped to [-1, 1]; nothing comes out before every latent frame is decoded."""
    if vae.use_tiling:
        raise ValueError("decode_full is the untiled reference: call vae.disable_tiling() first")
    return vae.decode(latents, return_dict=False)[0]


def iter_chunks(latents: torch.Tensor, chunk_frames: int) -> Iterator[torch.Tensor]:
    """A stream's pushes: the first latent frame alone, then ``chunk_frames`` at a time (the
    last chunk may be shorter). Views, no copies."""
    if chunk_frames < 1:
        raise ValueError(f"chunk_frames={chunk_frames} must be >= 1")
    yield latents[:, :, :1]
    for start in range(1, latents.shape[2], chunk_frames):
        yield latents[:, :, start:start + chunk_frames]


def decode_streaming(vae: AutoencoderKLWan, latents: torch.Tensor, chunk_frames: int = 1
                     ) -> torch.Tensor:
    """Push ``latents`` through a fresh ``StreamingDecoder`` and concatenate what comes out."""
    with StreamingDecoder(vae) as decoder:
        return torch.cat([decoder.push(c) for c in iter_chunks(latents, chunk_frames)], dim=2)


@dataclass
class _StreamState:
    """What one stream carries between pushes (dropped by ``reset``)."""

    cache: list  # one entry per causal conv: None, "Rep" (first frame seen) or (B, C, <=2, h, w)
    latent_frames: int = 0  # latent frames pushed so far
    geometry: tuple[int, int, int] | None = None  # (B, H, W) of the stream, fixed at first push


class StreamingDecoder:
    """Decode a latent video chunk by chunk, keeping Wan's causal feature cache across pushes.

    ``push(chunk)`` returns the pixel frames that chunk completes (over a stream, equal to
    ``decode_full``; bitwise with one frame per push). ``reset()`` starts a new stream (a hard
    cut); ``close()`` frees the cache. The VAE is only read: decoders may share one."""

    def __init__(self, vae: AutoencoderKLWan):
        if vae.use_tiling:
            raise ValueError("StreamingDecoder decodes untiled: call vae.disable_tiling() first")
        self.vae = vae
        self.factor = vae.config.scale_factor_temporal
        self.num_slots = sum(isinstance(m, WanCausalConv3d) for m in vae.decoder.modules())
        param = next(vae.parameters())
        self.device, self.dtype = param.device, param.dtype
        self._closed = False
        self._state = _StreamState(cache=[None] * self.num_slots)

    # -- the stream -------------------------------------------------------------------------

    @torch.no_grad()
    def push(self, chunk: torch.Tensor) -> torch.Tensor:
        """Decode the next latent frames (B, z_dim, F, H, W) -> pixels (B, 3, T, H', W'): T is 1
        for the first push (F must be 1), ``4·F`` after. Moved to the VAE's device and dtype."""
        state = self._check(chunk)
        first = state.latent_frames == 0
        z = chunk.to(device=self.device, dtype=self.dtype)  # as the VAE reads it: denormalized
        x = self.vae.post_quant_conv(z)  # 1x1x1 conv: per frame, so slicing it is exact
        # feat_idx is the cursor into the cache: every causal conv reads and advances it, in the
        # same order on every call, so slot i always belongs to the same conv.
        out = self.vae.decoder(x, feat_cache=state.cache, feat_idx=[0], first_chunk=first)
        if self.vae.config.patch_size is not None:  # Wan 2.2: 2x2 pixels folded in channels
            out = unpatchify(out, patch_size=self.vae.config.patch_size)
        out = torch.clamp(out, min=-1.0, max=1.0)  # as AutoencoderKLWan._decode does
        state.latent_frames += chunk.shape[2]
        return out

    def reset(self) -> None:
        """Start a new stream: empty cache, so the next push must again be a single frame."""
        if self._closed:
            raise RuntimeError("reset() after close(): this StreamingDecoder is closed; "
                               "create a new one")
        self._state = _StreamState(cache=[None] * self.num_slots)

    def close(self) -> None:
        """Free the cache; any later ``push`` or ``reset`` is an error."""
        self._closed = True
        self._state = _StreamState(cache=[])

    def __enter__(self) -> StreamingDecoder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- accounting -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def cache_nbytes(self) -> list[int]:
        """Bytes held per cache slot (0 for empty or "Rep" slots): the memory a stream keeps."""
        if self.closed:
            return []
        return [c.nbytes if isinstance(c, torch.Tensor) else 0 for c in self._state.cache]

    # -- validation -------------------------------------------------------------------------

    def _check(self, chunk: torch.Tensor) -> _StreamState:
        if self.closed:
            raise RuntimeError("push() after close(): this StreamingDecoder is closed; "
                               "create a new one (or call reset() instead of close())")
        state = self._state
        if chunk.ndim != 5:
            raise ValueError(f"a latent chunk is (B, C, F, H, W); got {chunk.ndim} dims "
                             f"{tuple(chunk.shape)}")
        b, c, f, h, w = chunk.shape
        if c != self.vae.config.z_dim:
            raise ValueError(f"latent chunk has C={c} channels but this VAE has z_dim="
                             f"{self.vae.config.z_dim}: the DiT's out_channels must equal the "
                             "VAE's z_dim")
        if f < 1:
            raise ValueError("a latent chunk must hold at least one frame (F >= 1), got F=0")
        if state.latent_frames == 0 and f != 1:
            raise ValueError(
                f"the first chunk of a stream must be exactly 1 latent frame, got F={f}: the "
                f"first frame decodes to 1 pixel frame and each later one to {self.factor} "
                f"(1 + {self.factor}·(F − 1) in all), and a first chunk of {f} would skip the "
                f"temporal upsampling of all {f}. Push chunk[:, :, :1], then chunk[:, :, 1:]")
        if state.geometry is None:
            state.geometry = (b, h, w)
        elif state.geometry != (b, h, w):
            raise ValueError(f"(B, H, W)={(b, h, w)} differs from this stream's "
                             f"{state.geometry}: the cache holds features of the old shape; "
                             "call reset() to start a new stream")
        return state
