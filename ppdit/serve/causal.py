"""Causal chunked generation with a rolling KV cache (CausVid style), on diffusers' Wan model.

A stream is generated a chunk (a few latent frames) at a time; each chunk is denoised while its
self-attention also sees the keys and values of earlier, already *clean* chunks::

    chunk 0: [denoise, no context]  -> clean 0 -> record K/V of clean 0 (one t=0 forward)
    chunk 1: [denoise, attends to K/V(0)] -> clean 1 -> record K/V of clean 1 (sees K/V(0))
    chunk 2: [denoise, attends to K/V(0), K/V(1)] ...

Only ``attn1`` changes (``CausalAttnProcessor`` prepends the layer's cached K/V); rope positions
stay absolute (chunk k's frames are frames ``k F .. (k+1) F - 1`` of the video).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import torch

from ppdit.attention import attend, attention_out, install, project_qk, project_v
from ppdit.model import epilogue, prologue, run_blocks
from ppdit.sampler import Denoiser, Request, SamplingConfig, StepState

# The cached path attends over [cached keys | chunk keys]; the full-sequence reference over the
# whole masked sequence. Same products, summed in another order (and masked terms are exact
# zeros): fp32 rounding of values of order 1 over a few blocks (seen: at most 7.2e-7 on the
# tiny preset; 6.0e-7 on another CPU, whose kernels sum in yet another order).
CAUSAL_TOL = {"rtol": 1e-4, "atol": 1e-5}


class KVCache:
    """Per-layer keys and values of the last ``window`` clean chunks, and the current mode: "use"
    attends to the cache (denoising a chunk); "record" attends to the cache *and* appends this
    forward's K/V (the clean chunk's); "mask": no cache, apply ``mask`` (the full-sequence
    reference)."""

    def __init__(self, num_layers: int, window: int | None = None):
        self.window = window
        self.chunks: list[list[tuple[torch.Tensor, torch.Tensor]]] = []  # [chunk][layer]
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.num_layers = num_layers
        self.mode = "use"
        self.mask: torch.Tensor | None = None

    def reset(self) -> None:
        """Forget every chunk (a hard cut, or before a recompute)."""
        self.chunks.clear()
        self._pending.clear()

    def context(self, layer: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Concatenated (k, v) of the cached chunks for one layer, (B, T, heads, hd) each."""
        if not self.chunks:
            return None
        ks, vs = zip(*(chunk[layer] for chunk in self.chunks), strict=True)
        return torch.cat(ks, dim=1), torch.cat(vs, dim=1)

    def stage(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Hold this layer's K/V until the record forward finishes (then ``commit``)."""
        if layer != len(self._pending):
            raise RuntimeError(f"layer {layer} recorded out of order")
        self._pending.append((k, v))

    def commit(self) -> None:
        """Append the recorded chunk; drop the oldest beyond the window (rolling)."""
        if len(self._pending) != self.num_layers:
            raise RuntimeError(f"recorded {len(self._pending)} of {self.num_layers} layers")
        self.chunks.append(self._pending)
        self._pending = []
        if self.window is not None and len(self.chunks) > self.window:
            self.chunks.pop(0)

    def nbytes(self) -> int:
        """Memory the cache holds."""
        return sum(k.numel() * k.element_size() * 2 for c in self.chunks for k, _ in c)


class CausalAttnProcessor:
    """Self-attention of one layer that also attends to the cached chunks of that layer."""

    def __init__(self, layer: int, cache: KVCache):
        self.layer, self.cache = layer, cache

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None,
                 rotary_emb=None):
        q, k = project_qk(attn, hidden_states, rotary_emb)
        v = project_v(attn, hidden_states)  # (B, S, heads, hd)
        mask = None
        if self.cache.mode == "mask":
            mask = self.cache.mask
        else:
            if self.cache.mode == "record":
                self.cache.stage(self.layer, k, v)
            ctx = self.cache.context(self.layer)
            if ctx is not None:
                k, v = torch.cat([ctx[0], k], dim=1), torch.cat([ctx[1], v], dim=1)
        return attention_out(attn, attend(q, k, v, mask), q)


def offset_rope(model, chunk_shape: tuple[int, ...], frame_offset: int):
    """Rope tables for a chunk whose first latent frame is frame ``frame_offset`` of the video:
    the last tokens of the tables for the whole prefix."""
    b, c, f, h, w = chunk_shape
    cos, sin = model.rope(torch.empty((b, c, frame_offset + f, h, w), device="meta"))
    p_t, p_h, p_w = model.config.patch_size
    n = (f // p_t) * (h // p_h) * (w // p_w)
    return cos[:, -n:], sin[:, -n:]


def chunk_forward(model, latent: torch.Tensor, timestep: torch.Tensor, text: torch.Tensor,
                  frame_offset: int) -> torch.Tensor:
    """The velocity of one chunk at ``frame_offset`` (cache per its mode); inputs cast to the
    model's dtype and the text to the latent's device (diffusers casts the timestep ``type_as``
    the text: a CPU text took it off the GPU)."""
    latent, text = latent.to(model.dtype), text.to(latent.device, model.dtype)
    hidden, ctx = prologue(model, latent, timestep, text)
    ctx.rotary_emb = offset_rope(model, tuple(latent.shape), frame_offset)
    return epilogue(model, run_blocks(model, hidden, ctx), ctx)


@dataclass(frozen=True)
class StreamConfig:
    """How a stream is cut into chunks and denoised."""

    chunk_frames: int = 2  # latent frames per chunk
    height: int = 16  # latent height and width
    width: int = 16
    channels: int = 16
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(num_steps=4))
    window: int | None = None  # chunks of context kept (None: all)
    causal: bool = True  # False: every chunk generated on its own (PP0 without recompute)

    def chunk_shape(self) -> tuple[int, int, int, int, int]:
        """(1, C, F_chunk, H, W)."""
        return (1, self.channels, self.chunk_frames, self.height, self.width)


def chunk_noise(seed: int, chunk_index: int, shape: tuple[int, ...]) -> torch.Tensor:
    """The noise of one chunk of a stream: a function of (stream seed, chunk index) only, so
    any rank — or a replay — draws the same."""
    g = torch.Generator().manual_seed(seed * 100_003 + chunk_index)
    return torch.randn(shape, generator=g)


class ChunkGenerator:
    """Generates a stream's chunks in order on one device, keeping the causal context."""

    def __init__(self, model, cfg: StreamConfig):
        self.model, self.cfg = model, cfg
        self.device = next(model.parameters()).device
        self.cache = KVCache(len(model.blocks), cfg.window)
        if cfg.causal:
            install(model, lambda i: CausalAttnProcessor(i, self.cache))
        self.next_chunk = 0

    def reset(self) -> None:
        """Hard cut: the next chunk starts a new video, with no context."""
        self.cache.reset()
        self.next_chunk = 0

    @torch.no_grad()
    def generate(self, chunk_index: int, seed: int, text: torch.Tensor,
                 noise: torch.Tensor | None = None) -> torch.Tensor:
        """Denoise chunk ``chunk_index`` (the chunks before it must be in the cache)."""
        if self.cfg.causal and chunk_index != len(self.cache.chunks) + self._dropped():
            raise ValueError(f"chunk {chunk_index} requested but the cache holds chunks up to "
                             f"{len(self.cache.chunks) + self._dropped() - 1}: generate in "
                             "order, or rebuild with context_frames_override")
        x = (noise if noise is not None else chunk_noise(seed, chunk_index,
                                                         self.cfg.chunk_shape())).to(self.device)
        offset = chunk_index * self.cfg.chunk_frames
        self.cache.mode = "use"
        # The shared sampling loop, with the forward placed at this chunk's frames.
        den = Denoiser(self.model, None, self.cfg.sampling,
                       forward=partial(chunk_forward, self.model, frame_offset=offset))
        request = Request(chunk_index, seed)
        den.condition_on(request, text)
        [state] = den.run([StepState(chunk_index, 0, x)], [request],
                          range(self.cfg.sampling.num_steps))
        x = state.latent
        if self.cfg.causal:
            self.record(x, offset, text)
        self.next_chunk = chunk_index + 1
        return x

    def _dropped(self) -> int:
        return self.next_chunk - len(self.cache.chunks) if self.cfg.causal else 0

    @torch.no_grad()
    def record(self, clean: torch.Tensor, frame_offset: int, text: torch.Tensor) -> None:
        """One t=0 forward of a clean chunk (same prompt), keeping its K/V as context."""
        self.cache.mode = "record"
        chunk_forward(self.model, clean, torch.zeros(1, device=self.device), text, frame_offset)
        self.cache.commit()
        self.cache.mode = "use"

    def rebuild(self, frames: torch.Tensor, text: torch.Tensor) -> None:
        """``context_frames_override``: replace the context with these clean latent frames
        (1, C, F, H, W), F a multiple of the chunk length; the next chunk follows them. The same
        record forwards as a stream's own, hence the same bits."""
        n = self.cfg.chunk_frames
        if frames.shape[2] % n:
            raise ValueError(f"context_frames_override has {frames.shape[2]} latent frames, "
                             f"not a multiple of chunk_frames={n}")
        self.cache.reset()
        for k in range(frames.shape[2] // n):
            self.record(frames[:, :, k * n:(k + 1) * n].to(self.device), k * n, text)
        self.next_chunk = frames.shape[2] // n


def full_sequence_reference(model, clean_context: torch.Tensor, chunk: torch.Tensor,
                            timestep: float, text: torch.Tensor) -> torch.Tensor:
    """The current chunk's velocity from ONE forward over [context | chunk], block-causal: context
    tokens carry timestep 0, like the record forwards (diffusers' per-token timestep path); a token
    of chunk j may attend to chunks 0..j only. It checks the cached path: equal to rounding, since
    attention over a masked long sequence sums in another order than over the cached keys."""
    b, _, f_chunk, h, w = chunk.shape
    n_ctx = clean_context.shape[2]
    full = torch.cat([clean_context, chunk], dim=2)
    per_frame = (h // 2) * (w // 2)
    token_chunk = (torch.arange(full.shape[2]) // f_chunk).repeat_interleave(per_frame)
    cache = model.blocks[0].attn1.processor.cache
    cache.mode = "mask"
    cache.mask = (token_chunk[:, None] >= token_chunk[None, :]).to(chunk.device)  # (S, S)
    try:
        t = torch.zeros(b, full.shape[2] * per_frame, device=chunk.device)
        t[:, n_ctx * per_frame:] = timestep
        with torch.no_grad():
            out = model(full, t, text, return_dict=False)[0]
    finally:
        cache.mode, cache.mask = "use", None
    return out[:, :, n_ctx:]
