"""Decode overlapped with generation: one rank makes latent chunks, another streams them to pixels.

The pattern the bring-up system (rank 0 = controller with the VAE, ranks 1.. = generator mesh)
reuses; here the mesh is a single generator rank::

    rank 1 (generator)  [gen c0][gen c1][gen c2][gen c3]
                              │ send  │       │       │
    rank 0 (decoder)          [dec c0] [dec c1] [dec c2] [dec c3]   (first frame: after gen c0)

Frames come out at the generator's pace, the first after *one* chunk. ``max_ahead`` bounds how
far the generator may run ahead (a credit flows back per decoded chunk); ``max_ahead=0`` is the
serial baseline. Chunks are generated independently (seed ``first_seed + k``): not a coherent
video, the data flow is the point. The handoff is a fixed ``FrameSpec``; the decoder pushes
chunk 0's first latent frame alone (the streaming decoder's rule), then the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ppdit.checkpoint.source import ModelPlan, ModelSource
from ppdit.runtime.comm.wire import FrameSpec
from ppdit.sampler import Request, SamplingConfig
from ppdit.vae.presets import get_vae_preset

DECODER_RANK = 0  # holds the VAE and the output stream, as the bring-up controller will
GENERATOR_RANK = 1


@dataclass(frozen=True)
class OverlapPlan(ModelPlan):
    """Everything both ranks must agree on; picklable."""

    num_chunks: int = 4
    chunk_frames: int = 2  # latent frames per generated chunk
    latent_hw: tuple[int, int] = (8, 8)  # latent H, W (tiny VAE: x4 in pixels)
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(num_steps=4))
    # the generator's DiT (in source.dtype) and the decoder's VAE (fp32, as diffusers runs it)
    source: ModelSource = field(default_factory=ModelSource)
    first_seed: int = 0  # chunk k is Request(k, first_seed + k)
    push_frames: int | None = None  # latent frames per decoder push; None: the whole chunk
    max_ahead: int = 2  # chunks the generator may run ahead of the decoder; 0 = serial
    use_graph_runner: bool = False  # generator steps through ppdit.cuda_graph.StepGraph
    warmup: bool = True  # one untimed chunk through both sides first
    timeout_s: float = 120.0  # bound on every P2P wait

    def __post_init__(self) -> None:
        vae = get_vae_preset(self.source.vae_preset)
        if self.source.folder is None and self.preset.in_channels != vae.z_dim:
            raise ValueError(f"the DiT preset {self.preset.name!r} makes "
                             f"{self.preset.in_channels}-channel latents but VAE preset "
                             f"{vae.name!r} decodes z_dim={vae.z_dim}")
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
        return (1, self.preset.in_channels, self.chunk_frames, *self.latent_hw)

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
        """Credits the decoder returns: chunk j's lets the generator start chunk j+1+max_ahead."""
        return max(0, self.num_chunks - 1 - self.max_ahead)

    def pushes(self, chunk: torch.Tensor, k: int) -> list[torch.Tensor]:
        """Chunk k as pushed (views): chunk 0's first frame alone, then push_frames at a time."""
        step = self.push_frames or chunk.shape[2]
        head = [chunk[:, :, :1]] if k == 0 else []
        rest = chunk[:, :, 1:] if k == 0 else chunk
        return head + [rest[:, :, i:i + step] for i in range(0, rest.shape[2], step)]
