"""Streaming vs full VAE decode, measured: time to first frame, total time, peak memory.

* **time to first frame (TTFF)** — until the first pixel frame can be shown: for a full decode,
  its total time; streaming returns frame 0 after decoding latent frame 0 alone, under 1/F of
  the work (it decodes to one pixel frame, later ones to four).
* **total** — until the last frame is out: streaming does the same convolutions (diffusers
  decodes frame by frame internally too); bigger chunks run fewer, larger kernels.
* **peak memory** — most bytes allocated at once (``runtime.observe.memory``): full decode holds
  the whole output plus its repeated ``torch.cat``'s copies; a streaming consumer one chunk's
  frames and the cache, so its peak does not grow with the video's length.

Modes are interleaved repeat by repeat, so a slow moment of a shared machine hits all of them."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from diffusers import AutoencoderKLWan

from ppdit.runtime.device import Placement
from ppdit.runtime.observe.memory import track_peak_memory
from ppdit.runtime.observe.timing import timed
from ppdit.vae.streaming import StreamingDecoder, decode_full, iter_chunks

CPU = Placement(torch.device("cpu"), "gloo")


@dataclass(frozen=True)
class DecodeMeasurement:
    """One decode mode on one latent video: medians over repeats, and the peak memory."""
    mode: str  # "full" or "stream k" (k latent frames per push after the first)
    chunk_frames: int | None  # k; None for full decode
    latent_frames: int  # F of the latent video
    ttff_s: float  # time to first frame
    total_s: float  # time to last frame
    peak_bytes: int  # most bytes allocated at once (one separate, untimed run)
    ttff_runs: tuple[float, ...] = ()  # every repeat's ttff, for the spread (quote.spread)
    total_runs: tuple[float, ...] = ()  # every repeat's total time

    def ratios(self, full: DecodeMeasurement) -> dict[str, float]:
        """This mode relative to full decode: ttff, total and peak memory ratios."""
        return {"ttff": self.ttff_s / full.total_s, "total": self.total_s / full.total_s,
                "peak_mem": self.peak_bytes / max(full.peak_bytes, 1)}


def time_full(vae: AutoencoderKLWan, latents: torch.Tensor, placement: Placement = CPU
              ) -> tuple[float, float]:
    """(ttff, total) of one full decode: the same number twice, everything arrives at once."""
    with timed(placement) as t:
        decode_full(vae, latents)
    return t.seconds, t.seconds


def time_stream(vae: AutoencoderKLWan, latents: torch.Tensor, chunk_frames: int,
                placement: Placement = CPU) -> tuple[float, float]:
    """(ttff, total) of one streaming decode; each chunk's frames are dropped once returned,
    as a player that shows and forgets them would."""
    ttff = None
    with timed(placement) as t, StreamingDecoder(vae) as decoder:
        for chunk in iter_chunks(latents, chunk_frames):
            frames = decoder.push(chunk)
            if ttff is None:
                ttff = t.lap()  # "shown" means the pixels exist, not just queued work
            del frames
    return ttff, t.seconds


def peak_bytes(vae: AutoencoderKLWan, latents: torch.Tensor, chunk_frames: int | None,
               placement: Placement = CPU) -> int:
    """Peak bytes of one decode (``chunk_frames=None``: full decode)."""
    with track_peak_memory(placement) as mem:
        if chunk_frames is None:
            decode_full(vae, latents)  # the output is alive at the peak: it is what is returned
        else:
            time_stream(vae, latents, chunk_frames, placement)
    return mem.peak_bytes


def measure_decode(vae: AutoencoderKLWan, latents: torch.Tensor,
                   chunk_sizes: Sequence[int] = (1, 2, 4), *, repeats: int = 3,
                   placement: Placement = CPU) -> list[DecodeMeasurement]:
    """Full decode and streaming with each chunk size on ``latents``: medians of ``repeats``.
    One untimed warm-up of every mode first (kernel selection, allocator growth)."""
    modes: list[int | None] = [None, *chunk_sizes]

    def once(k: int | None) -> tuple[float, float]:
        return (time_full(vae, latents, placement) if k is None
                else time_stream(vae, latents, k, placement))

    for k in modes:
        once(k)
    runs: dict[int | None, list[tuple[float, float]]] = {k: [] for k in modes}
    for r in range(repeats):
        for k in modes[r % len(modes):] + modes[:r % len(modes)]:
            runs[k].append(once(k))
    return [DecodeMeasurement(
        mode="full" if k is None else f"stream {k}", chunk_frames=k,
        latent_frames=latents.shape[2], ttff_s=statistics.median(t for t, _ in runs[k]),
        total_s=statistics.median(t for _, t in runs[k]),
        peak_bytes=peak_bytes(vae, latents, k, placement),
        ttff_runs=tuple(t for t, _ in runs[k]), total_runs=tuple(t for _, t in runs[k]))
        for k in modes]


def moving_blob_latent(frames: int, hw: tuple[int, int] = (16, 16), channels: int = 16,
                       seed: int = 0) -> torch.Tensor:
    """A latent (1, C, F, H, W) holding a Gaussian blob that moves left to right, one fixed
    random colour per channel: something whose decode, even through random weights, shows
    motion and would show a seam if a chunk boundary broke the causal cache."""
    g = torch.Generator().manual_seed(seed)
    h, w = hw
    colour = torch.randn(channels, generator=g).view(channels, 1, 1, 1)
    ys = torch.arange(h).view(1, h, 1).float()
    xs = torch.arange(w).view(1, 1, w).float()
    cx = torch.linspace(2, w - 3, frames).view(frames, 1, 1)
    blob = torch.exp(-((xs - cx) ** 2 + (ys - h / 2) ** 2) / (2 * (min(h, w) / 6) ** 2))
    return (3 * colour * blob.unsqueeze(0)).unsqueeze(0)  # (1, C, F, H, W)


def ttff_target(latent_frames: int) -> float:
    """The issue's target for streaming: TTFF <= 1.2 / F of the full decode's time."""
    return 1.2 / latent_frames


def format_table(rows: Sequence[DecodeMeasurement]) -> str:
    """A plain-text table with ratios to the full decode of the same F (printed by the bench)."""
    head = (f"{'F':>3} {'mode':>9} {'ttff ms':>9} {'total ms':>9} {'peak MiB':>9} "
            f"{'ttff/full':>9} {'total/full':>10} {'mem/full':>9} {'target':>7} {'ok':>3}")
    lines = [head, "-" * len(head)]
    full = {r.latent_frames: r for r in rows if r.chunk_frames is None}
    for r in rows:
        q = r.ratios(full[r.latent_frames])
        target = ttff_target(r.latent_frames)
        ok = "" if r.chunk_frames is None else ("yes" if q["ttff"] <= target else "NO")
        lines.append(f"{r.latent_frames:>3} {r.mode:>9} {r.ttff_s * 1e3:>9.1f} "
                     f"{r.total_s * 1e3:>9.1f} {r.peak_bytes / 2**20:>9.2f} {q['ttff']:>9.3f} "
                     f"{q['total']:>10.2f} {q['peak_mem']:>9.2f} {target:>7.3f} {ok:>3}")
    return "\n".join(lines)
