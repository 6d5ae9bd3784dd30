"""What each rank of a decode-overlap run does.

Generator (rank 1), per chunk k: wait for a credit if it is ``max_ahead`` chunks ahead ->
denoise chunk k, the last step writing straight into the outgoing frame -> send it (posted,
not waited for) -> next chunk. Decoder (rank 0), per chunk: receive (the next receive is posted
early, so the transfer overlaps this decode) -> push into the streaming decoder -> return a
credit. Spans: ``compute`` (a step), ``decode`` (a VAE push), ``send``/``recv``/``wait`` (P2P).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ppdit.cuda_graph import StepGraph
from ppdit.parallel.decode_overlap.plan import DECODER_RANK, GENERATOR_RANK, OverlapPlan
from ppdit.parallel.share import check_plans
from ppdit.runtime.comm.mesh import build_lanes
from ppdit.runtime.comm.wire import FrameReceiver, FrameSender, FrameSpec
from ppdit.runtime.observe.trace import Tracer
from ppdit.runtime.processes.rank import RankContext
from ppdit.runtime.rounds import Runner
from ppdit.sampler import Denoiser, Request, initial_noise
from ppdit.vae.streaming import StreamingDecoder

CREDIT = FrameSpec((1,), torch.int64, meta_slots=1)  # payload unused; meta = decoded chunk


class OverlapRunner(Runner):
    """Rank 1 generates, rank 0 decodes; each plan's rounds run both sides in step."""

    check = staticmethod(check_plans)

    @staticmethod
    def prepare(rank: int, world_size: int, plans: Sequence[OverlapPlan]):
        """Before the process group exists: the generator builds the DiT, the decoder the VAE."""
        if world_size != 2:
            raise ValueError(f"decode overlap runs on exactly 2 ranks, got world_size="
                             f"{world_size}")
        p = plans[0]
        return p.source.dit() if rank == GENERATOR_RANK else p.source.vae()

    def __init__(self, ctx: RankContext, plans: Sequence[OverlapPlan]):
        super().__init__(ctx, plans)
        module = ctx.prepared or self.prepare(ctx.rank, ctx.world_size, plans)
        module = module.to(ctx.device)
        # One communicator per direction (runtime.comm.mesh.Lanes): chunks down, credits up, so
        # under NCCL a credit never queues behind a chunk receive posted ahead, or the reverse.
        lanes = build_lanes([DECODER_RANK, GENERATOR_RANK])
        groups = (lanes.between(GENERATOR_RANK, DECODER_RANK),  # chunks
                  lanes.between(DECODER_RANK, GENERATOR_RANK))  # credits
        self.side = (_Generator(ctx, module, *groups) if ctx.rank == GENERATOR_RANK
                     else _Decoder(ctx, module, *groups))

    def warm_up(self, i: int) -> None:
        """One untimed chunk stream through both sides (a graph, if used, is captured here)."""
        if self.plans[i].warmup:
            self.side.run(self.plans[i], Tracer(self.ctx.rank, self.ctx.placement, enabled=False))

    def run(self, i: int, tracer: Tracer):
        """The decoder returns (video, received latents); the generator None."""
        return self.side.run(self.plans[i], tracer)

    def close(self) -> None:
        """Graphs are released before the runtime's barrier + destroy_process_group."""
        self.side.close()


class _Generator:
    def __init__(self, ctx: RankContext, model: torch.nn.Module, chunks, credits):
        self.ctx, self.model, self.chunks, self.credits = ctx, model, chunks, credits
        self._graphs: dict[tuple, object] = {}  # one StepGraph per (shape, sampling, preset)

    def close(self) -> None:
        """Release every captured graph (see ppdit.cuda_graph for why before process-group exit)."""
        for graph in self._graphs.values():
            graph.close()
        self._graphs.clear()

    def run(self, plan: OverlapPlan, tracer: Tracer) -> None:
        outbox = FrameSender(plan.frame_spec(), DECODER_RANK, self.ctx.wire, group=self.chunks,
                             max_in_flight=2, timeout_s=plan.timeout_s)
        credits = (FrameReceiver(CREDIT, DECODER_RANK, self.ctx.wire, group=self.credits,
                                 count=plan.num_credits(), timeout_s=plan.timeout_s)
                   if plan.num_credits() else None)
        den = Denoiser(self.model, plan.preset, plan.sampling)
        graph = self._graph_runner(plan) if plan.use_graph_runner else None
        for k, request in enumerate(plan.requests()):
            if k >= 1 + plan.max_ahead:  # chunk k waits until chunk k-1-max_ahead is out
                with tracer.span("wait", "credit", chunk=k):
                    credits.recv()
            frame = outbox.claim()  # the last step writes here: the send copies nothing

            def span(i, k=k):
                return tracer.span("compute", f"c{k}", gpu=True, chunk=k, step=i)

            if graph is None:
                den.run([den.initial_state(request, plan.chunk_shape)], [request],
                        range(plan.sampling.num_steps), span=span, out=frame)
                den.release(request)
            else:
                self._denoise_graph(plan, request, frame, span, graph)
            with tracer.span("send", f"c{k}", chunk=k):
                outbox.send(frame, [k])
        outbox.flush()

    def _graph_runner(self, plan: OverlapPlan):
        """Captured once per shape and reused by every round (capture costs warm-up runs)."""
        key = (plan.chunk_shape, plan.sampling, plan.preset)
        if key not in self._graphs:
            self._graphs[key] = StepGraph(self.model, latent_shape=plan.chunk_shape,
                                          sampling=plan.sampling, preset=plan.preset,
                                          placement=self.ctx.placement)
        return self._graphs[key]

    def _denoise_graph(self, plan: OverlapPlan, request: Request, frame: torch.Tensor, span,
                       graph) -> None:
        """The same steps through a StepGraph; P2P stays outside the captured region."""
        graph.load_request(request)
        latent = initial_noise(request, plan.chunk_shape).to(self.ctx.device)
        for i in range(plan.sampling.num_steps):
            with span(i):
                latent = graph.step(latent, i)
        frame.copy_(latent)  # static_out is overwritten by the next chunk's first step


class _Decoder:
    def __init__(self, ctx: RankContext, vae, chunks, credits):
        self.ctx, self.vae, self.chunks, self.credits = ctx, vae, chunks, credits
        self.cold = True

    def close(self) -> None:
        """Nothing outlives a run: each run's StreamingDecoder is closed when it ends."""

    def warm(self, plan: OverlapPlan) -> None:
        """Decode a zero chunk before any receive is posted: the VAE's first kernel launches
        may synchronise the device (lazy loading), and that sync would wait for chunk 1's
        receive, posted ahead, whose sender waits for chunk 0's credit (``max_ahead=0``)."""
        if self.cold:
            with StreamingDecoder(self.vae) as decoder:
                for piece in plan.pushes(torch.zeros(plan.chunk_shape, device=self.ctx.device), 0):
                    decoder.push(piece)
            self.cold = False

    def run(self, plan: OverlapPlan, tracer: Tracer) -> tuple[torch.Tensor, torch.Tensor]:
        self.warm(plan)
        inbox = FrameReceiver(plan.frame_spec(), GENERATOR_RANK, self.ctx.wire, group=self.chunks,
                              count=plan.num_chunks, timeout_s=plan.timeout_s)
        credits = (FrameSender(CREDIT, GENERATOR_RANK, self.ctx.wire, group=self.credits,
                               timeout_s=plan.timeout_s) if plan.num_credits() else None)
        frames, chunks = [], []
        with StreamingDecoder(self.vae) as decoder:
            for k in range(plan.num_chunks):
                with tracer.span("recv", f"c{k}", chunk=k):
                    latent, (index,) = inbox.recv()  # a ring-buffer view, valid while we decode
                if index != k:
                    raise RuntimeError(f"decoder expected chunk {k}, received chunk {index}")
                chunks.append(latent.clone())
                for piece in plan.pushes(latent, k):
                    with tracer.span("decode", f"c{k}", gpu=True, chunk=k,
                                     latent_frames=piece.shape[2]) as s:
                        out = decoder.push(piece)
                        s.meta["frames_out"] = out.shape[2]
                    frames.append(out)
                if k < plan.num_credits():  # chunk k is out: the generator may go on
                    with tracer.span("send", "credit", chunk=k):
                        credits.send(torch.ones(1, dtype=torch.int64, device=self.ctx.device), [k])
        if credits is not None:
            credits.flush()
        return torch.cat(frames, dim=2), torch.cat(chunks, dim=2)
