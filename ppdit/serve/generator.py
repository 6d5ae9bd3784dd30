"""Ranks 1..N, the generator mesh: rank 1 (the leader) talks to the controller; with tensor
parallelism (PP1) it broadcasts each envelope inside ``mesh_group`` so every mesh rank runs the
same step, issuing the same collectives in the same order.

The leader's loop: receive an envelope -> (PP1: broadcast it) -> act on its kind:

* ``generate``: drop it if its epoch is older than the last hard cut or its key was seen
  before (idempotent receive); else rebuild the context if asked
  (``context_frames_override``), generate the chunk and send the result without waiting;
* ``hard_cut``: adopt the new epoch, reset the KV cache;
* ``shutdown``: flush the sends and return.

A controller that stops answering ends the loop too (its receive fails or times out): the mesh
logs why and exits instead of waiting forever.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

import torch

from ppdit.runtime.comm.mesh import Lanes
from ppdit.runtime.observe.timing import timed
from ppdit.runtime.observe.trace import Tracer, collectives_into
from ppdit.runtime.processes.rank import RankContext
from ppdit.serve.causal import ChunkGenerator
from ppdit.serve.config import CONTROLLER, LEADER, BringupConfig
from ppdit.serve.protocol import (
    PPEnvelopeV1,
    PPResultV1,
    ProtocolError,
    isend_message,
    recv_message,
)
from ppdit.serve.queues import Deduplicator


@dataclass
class GeneratorReport:
    """What a generator-mesh rank saw."""

    rank: int
    generated: int = 0
    duplicates: int = 0
    stale_envelopes: int = 0
    stopped_by: str = "shutdown"


class GeneratorRank:
    """One mesh rank's loop (the leader talks to rank 0; followers get envelopes broadcast)."""

    def __init__(self, ctx: RankContext, cfg: BringupConfig, model, tracer: Tracer,
                 mesh_group=None, channel=None, lanes: Lanes | None = None):
        self.ctx, self.cfg, self.tracer = ctx, cfg, tracer
        # envelopes in and results out on a communicator each (see serve.controller)
        self.from_controller = lanes.between(CONTROLLER, LEADER) if lanes is not None else None
        self.to_controller = lanes.between(LEADER, CONTROLLER) if lanes is not None else None
        self.gen = ChunkGenerator(model, cfg.stream())
        self.mesh_group, self.channel = mesh_group, channel
        self.is_leader = ctx.rank == 1
        self.epoch = 0
        self.dedup = Deduplicator()
        self.report = GeneratorReport(ctx.rank)
        self.sends = []
        self.arrived = 0

    def run(self) -> GeneratorReport:
        """Serve envelopes until shutdown (or until the controller is gone)."""
        while True:
            env = self.next_envelope()
            if env is None or env.kind == "shutdown":
                break
            if env.kind == "hard_cut":
                self.epoch = env.epoch
                self.gen.reset()
                self.dedup.forget_before(env.epoch)
                continue
            self.generate(env)
        for s in self.sends:
            s.wait(self.cfg.timeout_s)
        return self.report

    def next_envelope(self) -> PPEnvelopeV1 | None:
        """The leader receives from rank 0 (and shares it with the mesh); followers receive the
        leader's broadcast. None: the controller is gone (the mesh is told to stop)."""
        if self.channel is not None and not self.is_leader:
            return self.channel.receive()
        try:
            with self.tracer.span("wait", "envelope"):
                env = recv_message(CONTROLLER, self.ctx.wire, group=self.from_controller,
                                   timeout_s=self.cfg.timeout_s)
        except ProtocolError:
            raise
        except (TimeoutError, RuntimeError) as err:
            print(f"mesh: the controller stopped ({type(err).__name__}: "
                  f"{str(err).splitlines()[0][:120]}); exiting", flush=True)
            self.report.stopped_by = "controller gone"
            if self.channel is not None:  # followers must stop too, not wait for a broadcast
                self.channel.share(PPEnvelopeV1(0, self.epoch, 0, 0, kind="shutdown"))
            return None
        if self.arrived == self.cfg.faults.kill_mesh_at:
            os.kill(os.getpid(), signal.SIGKILL)  # a mesh rank dies mid-stream, on purpose
        self.arrived += 1
        if self.channel is not None:
            self.channel.share(env)
        return env

    def generate(self, env: PPEnvelopeV1) -> None:
        """One chunk, unless stale or already done; the leader sends the result."""
        if env.epoch < self.epoch:
            self.report.stale_envelopes += 1
            return
        if not self.dedup.first_time(env.key):
            self.report.duplicates += 1
            return
        with timed(self.ctx.placement) as t:  # the chunk's kernels, not their launch
            text = env.conditioning.to(self.ctx.device)
            if env.context_frames_override is not None:
                self.gen.rebuild(env.context_frames_override, text)
            with (collectives_into(self.tracer),  # the mesh's all-reduces show on its lane
                  self.tracer.span("compute", f"v{env.request_id} c{env.chunk_index}",
                                   request=env.request_id, step=env.chunk_index)):
                latent = self.gen.generate(env.chunk_index, env.seed, text, env.noise)
        self.report.generated += 1
        if self.is_leader:
            took = torch.tensor([0.0, t.seconds], dtype=torch.float64)
            res = PPResultV1(env.request_id, env.epoch, env.seq, env.chunk_index, latent=latent,
                             timings=took)
            self.sends.append(isend_message(res, CONTROLLER, self.ctx.wire,
                                            group=self.to_controller))
            self.sends = [s for s in self.sends if not s.done()]
