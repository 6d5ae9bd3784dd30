"""Decode overlapped with generation: one rank makes latent chunks, another streams them to pixels.

The pattern the bring-up system (rank 0 = controller with the VAE, ranks 1.. = generator mesh)
reuses. Here the mesh is a single generator rank::

    rank 1 (generator)  [gen c0][gen c1][gen c2][gen c3]
                              │ send  │       │       │
    rank 0 (decoder)          [dec c0] [dec c1] [dec c2] [dec c3]   (first frame: after gen c0)

While rank 0 decodes chunk k, rank 1 already generates chunk k + 1, so the video's frames come
out at the generator's pace and the first one after *one* chunk, not after the whole video.
``max_ahead`` bounds how far the generator may run ahead of the decoder (the bounded output
queue of the design: a credit flows back per decoded chunk); ``max_ahead=0`` is the serial
baseline, generate - decode - generate - ...

Chunks are generated independently (request ``first_seed + k`` per chunk), so consecutive
chunks are not a coherent video: what matters here is the data flow and the timeline. Causal
chunked generation with a rolling context is a later lesson. Every chunk has the same shape, so
the handoff is a fixed ``FrameSpec``; the decoder pushes chunk 0's first latent frame alone (the
streaming decoder's rule) and the rest after it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch

from ppdit.model import get_preset
from ppdit.runtime.launch import launch
from ppdit.runtime.p2p import FrameSpec
from ppdit.runtime.trace import Rounds, Trace, merge
from ppdit.sampler import Request, SamplingConfig, generate
from ppdit.vae import StreamingDecoder
from ppdit.vae_presets import get_vae_preset

DECODER_RANK = 0  # holds the VAE and the output stream, as the bring-up controller will
GENERATOR_RANK = 1


@dataclass(frozen=True)
class OverlapPlan:
    """Everything both ranks must agree on; picklable."""

    num_chunks: int = 4
    chunk_frames: int = 2  # latent frames per generated chunk
    latent_hw: tuple[int, int] = (8, 8)  # latent H, W (tiny VAE: x4 in pixels)
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(num_steps=4))
    preset: str = "tiny"
    vae_preset: str = "tiny"
    model_seed: int = 0
    vae_seed: int = 0
    first_seed: int = 0  # chunk k is Request(k, first_seed + k)
    push_frames: int | None = None  # latent frames per decoder push; None: the whole chunk
    max_ahead: int = 2  # chunks the generator may run ahead of the decoder; 0 = serial
    use_graph_runner: bool = False  # generator steps through ppdit.graphs.StepGraph
    warmup: bool = True  # one untimed chunk through both sides first
    timeout_s: float = 120.0  # bound on every P2P wait

    def __post_init__(self) -> None:
        get_preset(self.preset)
        if get_preset(self.preset).in_channels != get_vae_preset(self.vae_preset).z_dim:
            raise ValueError(f"the DiT preset {self.preset!r} makes "
                             f"{get_preset(self.preset).in_channels}-channel latents but VAE "
                             f"preset {self.vae_preset!r} decodes z_dim="
                             f"{get_vae_preset(self.vae_preset).z_dim}")
        if self.num_chunks < 1 or self.chunk_frames < 1:
            raise ValueError(f"num_chunks={self.num_chunks} and chunk_frames="
                             f"{self.chunk_frames} must both be >= 1")
        if self.max_ahead < 0:
            raise ValueError(f"max_ahead={self.max_ahead} must be >= 0 (0 = serial)")
        if self.push_frames is not None and self.push_frames < 1:
            raise ValueError(f"push_frames={self.push_frames} must be >= 1 (or None)")

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        """(1, C, chunk_frames, H, W) of every generated chunk."""
        return (1, get_preset(self.preset).in_channels, self.chunk_frames, *self.latent_hw)

    @property
    def latent_frames(self) -> int:
        """Latent frames in the whole video."""
        return self.num_chunks * self.chunk_frames

    def requests(self) -> list[Request]:
        """One request per chunk, in generation order."""
        return [Request(k, self.first_seed + k) for k in range(self.num_chunks)]

    def frame_spec(self) -> FrameSpec:
        """The handoff: one chunk's latent plus its index."""
        return FrameSpec(self.chunk_shape, torch.float32, meta_slots=1)

    def num_credits(self) -> int:
        """Credits the decoder returns: the generator waits for chunk j's before starting chunk
        j + 1 + max_ahead, for every such chunk that exists."""
        return max(0, self.num_chunks - 1 - self.max_ahead)

    def pushes(self, chunk: torch.Tensor, k: int) -> list[torch.Tensor]:
        """How the decoder feeds chunk k: chunk 0's first frame alone, then ``push_frames`` at
        a time (views)."""
        step = self.push_frames or chunk.shape[2]
        head = [chunk[:, :, :1]] if k == 0 else []
        rest = chunk[:, :, 1:] if k == 0 else chunk
        return head + [rest[:, :, i:i + step] for i in range(0, rest.shape[2], step)]


@dataclass
class OverlapResult(Rounds):
    """Merged outcome: the decoded video, the latents it came from, one timeline per round."""

    plan: OverlapPlan
    video: torch.Tensor  # (1, 3, 1 + 4 (F - 1), H', W'): every decoded frame, in order
    latents: torch.Tensor  # (1, C, F, H, W): the chunks as the decoder received them
    traces: list[Trace]

    def first_frame_s(self, round_index: int = -1) -> float:
        """Seconds from the round's start to the end of the first decode: the first frame."""
        return frames_ready(self.traces[round_index])[0][0]

    def summary(self) -> dict[str, float]:
        """Median makespan and first-frame time over rounds, in seconds."""
        return {"makespan_s": statistics.median(self.makespans_s),
                "first_frame_s": statistics.median(
                    self.first_frame_s(i) for i in range(len(self.traces)))}


def frames_ready(trace: Trace) -> list[tuple[float, int]]:
    """(seconds since the start, pixel frames available so far) after every decode span."""
    out, total = [], 0
    for s in trace.select("decode"):
        total += s.meta["frames_out"]
        out.append((s.end_ns / 1e9, total))
    return out


def run_decode_overlap(plans: dict[str, OverlapPlan], rounds: int = 1, **launch_kwargs
                       ) -> dict[str, OverlapResult]:
    """Launch 2 ranks and run every plan ``rounds`` times, interleaved round by round.

    All plans must share the models (presets and seeds): each rank builds its model once.
    Ranks get one thread each unless ``threads_per_rank`` says otherwise.
    """
    from ppdit.parallel.decode_stage import overlap_worker, setup_overlap

    first = next(iter(plans.values()))
    key = (first.preset, first.vae_preset, first.model_seed, first.vae_seed)
    if any((p.preset, p.vae_preset, p.model_seed, p.vae_seed) != key for p in plans.values()):
        raise ValueError("plans run side by side must share preset, vae_preset and both seeds")
    if rounds < 1:
        raise ValueError(f"rounds={rounds} must be >= 1")
    launch_kwargs.setdefault("threads_per_rank", 1)
    ordered = tuple(plans.values())
    per_rank = launch(overlap_worker, 2, args=(ordered, rounds), setup=setup_overlap,
                      **launch_kwargs)
    out = {}
    for i, (name, plan) in enumerate(plans.items()):
        dec, gen = per_rank[DECODER_RANK][i], per_rank[GENERATOR_RANK][i]
        traces = [merge([dec.traces[k], gen.traces[k]]) for k in range(rounds)]
        out[name] = OverlapResult(plan, dec.video, dec.latents, traces)
    return out


def overlap_reference(model: torch.nn.Module, vae, plan: OverlapPlan
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """(latents, video) on one device: the same chunks, pushed the same way (== the run, bit for
    bit). With ``push_frames=1`` the video also equals ``decode_full(vae, latents)`` bitwise."""
    chunks = [generate(model, r, preset=plan.preset, sampling=plan.sampling,
                       latent_shape=plan.chunk_shape) for r in plan.requests()]
    with StreamingDecoder(vae) as decoder:
        frames = [decoder.push(p) for k, c in enumerate(chunks) for p in plan.pushes(c, k)]
    return torch.cat(chunks, dim=2), torch.cat(frames, dim=2)


__all__ = ["DECODER_RANK", "GENERATOR_RANK", "OverlapPlan", "OverlapResult", "frames_ready",
           "overlap_reference", "run_decode_overlap"]
