"""Rank 0, the controller: holds the requests and the prompts, sends envelopes to the mesh
leader, drops stale results, decodes chunks with the streaming VAE and feeds the output.

::

    schedule --> [send envelopes, <= in_flight ahead] --D_IN--> mesh
    mesh --results--> [drop stale / duplicate] --> [decode] --D_OUT--> output consumer (thread)

With ``in_flight = 1`` (PP0) every step waits for the previous one; with 2 (overlap) the mesh
generates chunk k + 1 while this rank decodes chunk k.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import torch

from ppdit.runtime.comm.mesh import Lanes
from ppdit.runtime.observe.timing import now_ns
from ppdit.runtime.observe.trace import Tracer
from ppdit.runtime.processes.rank import RankContext
from ppdit.serve.config import CONTROLLER, LEADER, BringupConfig
from ppdit.serve.protocol import PPEnvelopeV1, PPResultV1, isend_message, recv_message
from ppdit.serve.queues import BoundedQueue, Deduplicator
from ppdit.vae.decode import denormalize
from ppdit.vae.streaming import StreamingDecoder


@dataclass
class Delivered:
    """One chunk that reached the output stream."""

    epoch: int
    video: int
    chunk_index: int
    frames: int  # pixel frames it added
    t_ns: int  # when the consumer took it


@dataclass
class ControllerReport:
    """What rank 0 saw: latents, the output stream, queue and drop statistics."""

    latents: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)
    video: dict[int, list[torch.Tensor]] = field(default_factory=dict)  # pixel chunks per video
    delivered: list[Delivered] = field(default_factory=list)
    dropped_stale: int = 0
    duplicate_results: int = 0
    max_depth: dict[str, int] = field(default_factory=dict)
    producer_blocked_s: float = 0.0
    start_ns: int = 0
    end_ns: int = 0


class Controller:
    """The rank-0 loop of one bring-up run."""

    def __init__(self, ctx: RankContext, cfg: BringupConfig, vae, tracer: Tracer,
                 lanes: Lanes | None = None):
        self.ctx, self.cfg, self.tracer = ctx, cfg, tracer
        # Why the overlap phase's order is safe under NCCL: envelopes (posted ahead, not waited
        # for) and results travel on two communicators (``lanes``). On one, a large envelope
        # send queued ahead of the receive of a result blocks both ranks: the leader's result
        # send waits for that receive, the envelope for the leader's next receive.
        self.to_mesh = lanes.between(CONTROLLER, LEADER) if lanes is not None else None
        self.from_mesh = lanes.between(LEADER, CONTROLLER) if lanes is not None else None
        self.decoder = None if vae is None else StreamingDecoder(vae)
        # A trained folder's DiT works on normalised latents (its VAE config holds the stats).
        self.normalised = cfg.source.folder is not None
        self.d_in = BoundedQueue("D_IN", cfg.ahead, tracer)
        self.d_out = BoundedQueue("D_OUT", cfg.d_out_capacity, tracer)
        self.report = ControllerReport()
        self.epoch, self.video, self.seq = 0, 0, 0
        self.dedup = Deduplicator()
        self.sends = []
        self.pushed: dict[int, int] = {}  # latent frames decoded per video
        self.prompts = cfg.prompt_embeddings()

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> ControllerReport:
        """Send the schedule, receive, decode, deliver; then shut the mesh down."""
        consumer = threading.Thread(target=self._consume, name="output-consumer", daemon=True)
        consumer.start()
        self.report.start_ns = now_ns()
        actions, position = list(self.cfg.schedule()), 0
        while actions or len(self.d_in):
            while actions and (actions[0][0] == "cut" or len(self.d_in) < self.cfg.ahead):
                kind, video, index = actions.pop(0)
                if kind == "cut":
                    self.hard_cut(video)
                else:
                    self.submit(video, index, position)
                    position += 1
            if len(self.d_in):
                self.receive()
        self._send(PPEnvelopeV1(0, self.epoch, self.seq, 0, kind="shutdown"))
        for s in self.sends:
            s.wait(self.cfg.timeout_s)
        self.d_out.put(None, self.cfg.timeout_s)
        consumer.join(self.cfg.timeout_s)
        self.report.end_ns = now_ns()
        self.report.max_depth = {"D_IN": self.d_in.max_depth, "D_OUT": self.d_out.max_depth}
        self.report.producer_blocked_s = self.d_out.blocked_s
        return self.report

    def submit(self, video: int, index: int, position: int) -> None:
        """Envelope for chunk ``index`` of ``video``, sent without waiting (faults applied)."""
        f = self.cfg.faults
        env = PPEnvelopeV1(video, self.epoch, self.seq, index, num_steps=self.cfg.num_steps,
                           seed=self.cfg.seeds[video], conditioning=self.prompts[video])
        self.seq += 1
        self.d_in.put(env.key, self.cfg.timeout_s)
        with self.tracer.span("send", f"v{video} c{index}", request=video, step=index):
            self._send(env, version=2 if position == f.wrong_version_at else 1)
            if position == f.duplicate_at:
                self._send(env)  # a replay: the mesh must not answer it twice
        if position == f.controller_crash_at:
            raise RuntimeError(f"controller crashed on purpose after chunk {position}")

    def hard_cut(self, video: int) -> None:
        """Start a new video: new epoch, mesh told, decoder reset; in-flight results go stale."""
        self.epoch += 1
        self.video = video
        with self.tracer.span("send", "hard cut", epoch=self.epoch):
            self._send(PPEnvelopeV1(video, self.epoch, self.seq, 0, kind="hard_cut"))
        self.seq += 1
        if self.decoder is not None:
            self.decoder.reset()
        self.dedup.forget_before(self.epoch)

    def receive(self) -> None:
        """One result from the leader: drop it if stale or repeated, else decode and deliver."""
        with self.tracer.span("recv", "result"):
            res = recv_message(LEADER, self.ctx.wire, group=self.from_mesh,
                               timeout_s=self.cfg.timeout_s)
        if not isinstance(res, PPResultV1):
            raise RuntimeError(f"expected a PPResultV1 from the mesh, got {type(res).__name__}")
        self.d_in.remove(lambda key: key == res.key)
        if res.epoch < self.epoch:
            self.report.dropped_stale += 1
            self.tracer.counter("dropped stale", self.report.dropped_stale)
            return
        if not self.dedup.first_time(res.key):
            self.report.duplicate_results += 1
            return
        latent = res.latent.cpu()
        self.report.latents[(res.request_id, res.chunk_index)] = latent
        pixels = self.decode(res.request_id, latent, res.chunk_index)
        self.d_out.put((res.epoch, res.request_id, res.chunk_index, pixels), self.cfg.timeout_s)

    def decode(self, video: int, latent: torch.Tensor, index: int) -> torch.Tensor | None:
        """Streaming VAE decode; a video's very first push must be a single latent frame."""
        if self.decoder is None:
            return None
        with self.tracer.span("decode", f"v{video} c{index}", request=video, step=index):
            if self.normalised:  # elementwise: a chunk denormalizes as the whole video would
                latent = denormalize(latent, self.decoder.vae.config)
            pieces = []
            if self.pushed.get(video, 0) == 0:
                pieces.append(self.decoder.push(latent[:, :, :1]))
                latent = latent[:, :, 1:]
            if latent.shape[2]:
                pieces.append(self.decoder.push(latent))
            self.pushed[video] = self.pushed.get(video, 0) + sum(p.shape[2] for p in pieces)
            return torch.cat(pieces, dim=2)

    def _send(self, env: PPEnvelopeV1, version: int = 1) -> None:
        self.sends.append(isend_message(env, LEADER, self.ctx.wire, group=self.to_mesh,
                                        version=version))
        self.sends = [s for s in self.sends if not s.done()]

    def _consume(self) -> None:
        """The output stream: takes decoded chunks in order (slowly, if asked)."""
        while True:
            item = self.d_out.get(timeout_s=self.cfg.timeout_s * 4)
            if item is None:
                return
            epoch, video, index, pixels = item
            n = 0 if pixels is None else pixels.shape[2]
            if pixels is not None:
                self.report.video.setdefault(video, []).append(pixels)
            self.report.delivered.append(Delivered(epoch, video, index, n,
                                                   now_ns()))
            if self.cfg.consumer_delay_s:
                time.sleep(self.cfg.consumer_delay_s)

