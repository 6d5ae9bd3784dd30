"""PP1: tensor parallelism inside the generator mesh, and nowhere else.

Rank 0 never joins a collective of ``mesh_group`` (ranks 1..N): it only talks to the leader,
point to point. The leader re-broadcasts each envelope inside ``mesh_group`` so that every mesh
rank runs the same chunk, issuing the same all-reduces in the same order — the invariant whose
violation is a hang ("multi-PG ordering" in the study guide). The broadcast is a header (the
envelope's framing) and then each payload, shape first.
"""

from __future__ import annotations

import torch

from ppdit.checkpoint.source import ModelSource
from ppdit.model import condition, embed_patches
from ppdit.parallel.tensor.comms import trace_report
from ppdit.parallel.tensor.parallelize import parallelize_wan
from ppdit.runtime.comm.mesh import world_group
from ppdit.runtime.comm.wire import broadcast_tensor
from ppdit.runtime.processes.rank import RankContext
from ppdit.sampler import Request, SamplingConfig, prompt_embeddings
from ppdit.serve.causal import ChunkGenerator, StreamConfig, offset_rope
from ppdit.serve.config import LEADER
from ppdit.serve.protocol import PPEnvelopeV1, decode, encode


class MeshChannel:
    """The leader shares envelopes with the followers of ``mesh_group`` by broadcast."""

    def __init__(self, ctx: RankContext, mesh_group):
        self.ctx, self.group = ctx, mesh_group

    def share(self, env: PPEnvelopeV1) -> None:
        """Leader: broadcast ``env`` (header, then each payload with its shape)."""
        header, payloads = encode(env)
        broadcast_tensor(header, LEADER, self.ctx.wire, group=self.group)
        for t in payloads:
            broadcast_tensor(t, LEADER, self.ctx.wire, group=self.group)

    def receive(self) -> PPEnvelopeV1:
        """Follower: the envelope the leader is about to process."""
        header = broadcast_tensor(None, LEADER, self.ctx.wire, group=self.group)
        payloads = [broadcast_tensor(None, LEADER, self.ctx.wire, group=self.group)
                    for _ in range(int(header[10]))]
        return decode(header.cpu(), payloads)


def explain_mesh_block(ctx: RankContext, context_chunks: int = 2) -> dict:
    """On every rank of a TP group: Dynamo's view of one mesh block as PP1 runs it — TP layers
    with functional collectives, the causal processor attending to a KV cache. Returns graph
    and graph-break counts (no Inductor compile: seconds)."""
    world = ctx.world_size  # the mesh alone: every rank one TP group (runtime.comm.mesh makes it)
    group = world_group(ctx.rank, world)
    model = parallelize_wan(ModelSource("tiny").dit(ctx.device), tp_group=group,
                            wire=ctx.wire)  # funcol: compile-friendly
    gen = ChunkGenerator(model, StreamConfig(chunk_frames=2,
                                             sampling=SamplingConfig(num_steps=2)))
    text = prompt_embeddings(Request(0, 1), "tiny").to(ctx.device)
    for k in range(context_chunks):
        gen.generate(k, 1, text)
    x = torch.zeros(1, 16, 2, 16, 16, device=ctx.device)
    with torch.no_grad():
        cond = condition(model, tuple(x.shape), torch.tensor([500.0], device=ctx.device), text)
        cond.rotary_emb = offset_rope(model, tuple(x.shape), 2 * context_chunks)
        block = model.blocks[0]
        report = trace_report(lambda h: block(h, cond.text, cond.timestep_proj, cond.rotary_emb),
                              embed_patches(model, x))
    return {"graphs": report.graph_count, "graph_breaks": report.graph_break_count,
            "reasons": report.break_reasons, "all_reduces_in_graph": report.graph_all_reduces}
