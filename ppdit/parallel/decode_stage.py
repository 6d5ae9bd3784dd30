"""What each rank of a decode-overlap run does (the plan and entry point: ``decode_overlap.py``).

Generator (rank 1), per chunk k: wait for a credit if it is ``max_ahead`` chunks ahead ->
denoise chunk k, the last step writing straight into the outgoing frame -> send it (posted,
not waited for) -> next chunk. Decoder (rank 0), per chunk: receive (the next receive is posted
early, so the transfer overlaps this decode) -> push into the streaming decoder -> return a
credit. Spans: ``compute`` (a denoising step), ``decode`` (a VAE push), ``send`` / ``recv`` /
``wait`` (P2P and credits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ppdit.model import build_model
from ppdit.parallel.decode_overlap import DECODER_RANK, GENERATOR_RANK, OverlapPlan
from ppdit.runtime.launch import RankContext
from ppdit.runtime.p2p import FrameReceiver, FrameSender, FrameSpec
from ppdit.runtime.trace import RankTrace, Tracer
from ppdit.sampler import Denoiser, Request
from ppdit.vae import StreamingDecoder
from ppdit.vae_presets import build_vae

CREDIT = FrameSpec((1,), torch.int64, meta_slots=1)  # payload unused; meta = decoded chunk


@dataclass
class OverlapRankResult:
    """What one rank returns for one plan."""

    rank: int
    traces: list[RankTrace] = field(default_factory=list)  # one per round
    video: torch.Tensor | None = None  # decoder: the last round's frames
    latents: torch.Tensor | None = None  # decoder: the last round's received chunks


def setup_overlap(rank: int, world_size: int, plans: Sequence[OverlapPlan], rounds: int):
    """Before the process group exists: the generator builds the DiT, the decoder the VAE."""
    if world_size != 2:
        raise ValueError(f"decode overlap runs on exactly 2 ranks, got world_size={world_size}")
    p = plans[0]
    if rank == GENERATOR_RANK:
        return build_model(p.preset, seed=p.model_seed)
    return build_vae(p.vae_preset, seed=p.vae_seed)


def overlap_worker(ctx: RankContext, plans: Sequence[OverlapPlan], rounds: int
                   ) -> list[OverlapRankResult]:
    """Run every plan ``rounds`` times (round k starts at plan k mod n), both ranks in step."""
    module = (ctx.prepared or setup_overlap(ctx.rank, ctx.world_size, plans, rounds))
    module = module.to(ctx.device)
    side = _Generator(ctx, module) if ctx.rank == GENERATOR_RANK else _Decoder(ctx, module)
    for plan in plans:
        if plan.warmup:
            side.run(plan, Tracer(ctx.rank, ctx.placement, enabled=False))
    results = [OverlapRankResult(ctx.rank) for _ in plans]
    try:
        for k in range(rounds):
            for i in [(k + j) % len(plans) for j in range(len(plans))]:
                dist.barrier()
                tracer = Tracer(ctx.rank, ctx.placement)
                out = side.run(plans[i], tracer)
                results[i].traces.append(tracer.finish())
                if out is not None:
                    results[i].video, results[i].latents = out
    finally:
        side.close()  # graphs are released before the runtime's barrier + destroy_process_group
    return results


class _Generator:
    def __init__(self, ctx: RankContext, model: torch.nn.Module):
        self.ctx, self.model = ctx, model
        self._graphs: dict[tuple, object] = {}  # one StepGraph per (shape, sampling, preset)

    def close(self) -> None:
        """Release every captured graph (see ppdit.graphs for why before process-group exit)."""
        for graph in self._graphs.values():
            graph.close()
        self._graphs.clear()

    def run(self, plan: OverlapPlan, tracer: Tracer) -> None:
        outbox = FrameSender(plan.frame_spec(), DECODER_RANK, device=self.ctx.device,
                             max_in_flight=2, timeout_s=plan.timeout_s)
        credits = (FrameReceiver(CREDIT, DECODER_RANK, device=self.ctx.device,
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
                self._denoise(den, plan, request, frame, span)
            else:
                self._denoise_graph(plan, request, frame, span, graph)
            with tracer.span("send", f"c{k}", chunk=k):
                outbox.send(frame, [k])
        outbox.flush()

    @staticmethod
    def _denoise(den: Denoiser, plan: OverlapPlan, request: Request, frame: torch.Tensor,
                 span) -> None:
        steps = range(plan.sampling.num_steps)
        den.run([den.initial_state(request, plan.chunk_shape)], [request], steps, span=span,
                out=frame)
        den.release(request)

    def _graph_runner(self, plan: OverlapPlan):
        """Captured once per shape and reused by every round (capture costs warm-up runs)."""
        from ppdit.graphs import StepGraph

        key = (plan.chunk_shape, plan.sampling, plan.preset)
        if key not in self._graphs:
            self._graphs[key] = StepGraph(self.model, latent_shape=plan.chunk_shape,
                                          sampling=plan.sampling, preset=plan.preset,
                                          placement=self.ctx.placement)
        return self._graphs[key]

    def _denoise_graph(self, plan: OverlapPlan, request: Request, frame: torch.Tensor, span,
                       graph) -> None:
        """The same steps through a StepGraph; P2P stays outside the captured region."""
        from ppdit.sampler import initial_noise

        graph.load_request(request)
        latent = initial_noise(request, plan.chunk_shape).to(self.ctx.device)
        for i in range(plan.sampling.num_steps):
            with span(i):
                latent = graph.step(latent, i)
        frame.copy_(latent)  # static_out is overwritten by the next chunk's first step


class _Decoder:
    def __init__(self, ctx: RankContext, vae):
        self.ctx, self.vae = ctx, vae

    def close(self) -> None:
        """Nothing outlives a run: each run's StreamingDecoder is closed when it ends."""

    def run(self, plan: OverlapPlan, tracer: Tracer) -> tuple[torch.Tensor, torch.Tensor]:
        inbox = FrameReceiver(plan.frame_spec(), GENERATOR_RANK, device=self.ctx.device,
                              count=plan.num_chunks, timeout_s=plan.timeout_s)
        credits = (FrameSender(CREDIT, GENERATOR_RANK, device=self.ctx.device,
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
                        credits.send(torch.ones(1, dtype=torch.int64, device=self.ctx.device),
                                     [k])
        if credits is not None:
            credits.flush()
        return torch.cat(frames, dim=2), torch.cat(chunks, dim=2)
