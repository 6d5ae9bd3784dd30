"""What a bring-up run does: the phase, the stream, the hard cut, the faults to inject.

Phases (the study guide's PP0 -> PP1, one failure class at a time):

* ``pp0``: rank 0 <-> mesh leader, blocking, one request at a time, chunks independent;
* ``overlap``: non-blocking sends, ``in_flight`` envelopes ahead, so rank 0 decodes chunk k
  while the mesh generates chunk k + 1;
* ``recompute``: chunks attend to a rolling KV cache of earlier clean chunks (causal);
* ``pp1``: the mesh is a tensor-parallel group (rank 0 never joins its collectives).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ppdit.checkpoint.source import ModelSource
from ppdit.sampler import Request, SamplingConfig
from ppdit.serve.causal import StreamConfig

PHASES = ("pp0", "overlap", "recompute", "pp1")
CONTROLLER, LEADER = 0, 1  # global ranks: rank 0 controls, rank 1 leads the generator mesh


@dataclass(frozen=True)
class Faults:
    """Deliberate failures, each keyed by the chunk (position in the schedule) it hits."""

    duplicate_at: int | None = None  # the controller sends this envelope twice
    wrong_version_at: int | None = None  # ... sends this one with protocol version 2
    controller_crash_at: int | None = None  # the controller raises after sending this one
    kill_mesh_at: int | None = None  # the mesh leader SIGKILLs itself when this one arrives


@dataclass(frozen=True)
class BringupConfig:
    """One run of the controller + mesh system."""

    phase: str = "pp0"
    chunks: int = 4  # envelopes of work in the schedule (across the cut)
    cut_at: int | None = None  # before this schedule position, a hard cut starts a new video
    chunk_frames: int = 2  # latent frames per chunk
    latent_hw: tuple[int, int] = (16, 16)
    num_steps: int = 4
    window: int | None = None  # causal context kept, in chunks (None: all)
    # The weights: a seeded preset (random DiT and VAE, seeded stand-in prompts), or a trained
    # pipeline folder (e.g. models/toy_shapes): the mesh loads its transformer, rank 0 its VAE,
    # tokenizer and text encoder. The mesh's DiT runs in ``source.dtype``; the VAE in fp32.
    source: ModelSource = field(default_factory=ModelSource)
    decode: bool = True  # False: the controller only collects latents (no VAE)
    seeds: tuple[int, int] = (11, 22)  # video seeds before / after the cut
    prompts: tuple[str, str] | None = None  # a folder's text prompts before / after the cut
    channels: int = 16  # latent channels (the checkpoint's DiT in_channels)
    in_flight: int | None = None  # envelopes ahead; default 1 for pp0, 2 otherwise
    d_out_capacity: int = 4  # decoded chunks waiting for the output consumer
    consumer_delay_s: float = 0.0  # a slow output (to show backpressure)
    tp: int = 1  # mesh ranks; pp1 needs >= 2
    faults: Faults = field(default_factory=Faults)
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"phase={self.phase!r} is not one of {PHASES}")
        if self.chunks < 1:
            raise ValueError(f"chunks={self.chunks} must be >= 1")
        if self.cut_at is not None and not 0 < self.cut_at < self.chunks:
            raise ValueError(f"cut_at={self.cut_at} must fall inside the schedule "
                             f"(0 < cut_at < chunks={self.chunks})")
        if self.phase == "pp1" and self.tp < 2:
            raise ValueError(f"phase 'pp1' puts tensor parallelism in the mesh: tp={self.tp} "
                             "must be >= 2")
        if self.phase != "pp1" and self.tp != 1:
            raise ValueError(f"tp={self.tp}: only phase 'pp1' has a multi-rank mesh")
        if (self.prompts is None) != (self.source.folder is None):
            raise ValueError(f"folder={self.source.folder!r} and prompts={self.prompts!r}: "
                             "text prompts need a pipeline folder with a text encoder, and a "
                             "folder needs the prompts to encode (give both or neither)")
        if self.window is not None and self.window < 1:
            raise ValueError(f"window={self.window} must be >= 1 chunk (or None)")

    @property
    def world_size(self) -> int:
        """Rank 0 (controller) plus the mesh."""
        return 1 + self.tp

    @property
    def causal(self) -> bool:
        """Whether chunks attend to earlier chunks (recompute and later)."""
        return self.phase in ("recompute", "pp1")

    @property
    def ahead(self) -> int:
        """Envelopes the controller keeps in flight."""
        return self.in_flight or (1 if self.phase == "pp0" else 2)

    def stream(self) -> StreamConfig:
        """The chunk generator's settings."""
        h, w = self.latent_hw
        return StreamConfig(chunk_frames=self.chunk_frames, height=h, width=w,
                            channels=self.channels,
                            sampling=SamplingConfig(num_steps=self.num_steps),
                            window=self.window, causal=self.causal)

    def prompt_embeddings(self) -> dict:
        """Each video's prompt embeddings (1, L, text_dim), by video index: a folder encodes
        the text prompts (``WanPipeline``'s arithmetic), a preset draws seeded stand-ins."""
        requests = [Request(v, s) for v, s in enumerate(self.seeds)]
        return dict(enumerate(self.source.prompts(requests, self.prompts)))

    def schedule(self) -> list[tuple[str, int, int]]:
        """The controller's actions in order: ("cut", epoch, 0) or ("chunk", video, index)."""
        out, video, index = [], 0, 0
        for pos in range(self.chunks):
            if pos == self.cut_at:
                video, index = video + 1, 0
                out.append(("cut", video, 0))
            out.append(("chunk", video, index))
            index += 1
        return out
