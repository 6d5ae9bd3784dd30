"""The bring-up system end to end: launch rank 0 + the mesh, run a stream, collect everything.

``run_bringup(cfg)`` returns a ``BringupResult``: the latents and pixels rank 0 delivered, its
queue and drop statistics, each mesh rank's report, and the merged trace.
``reference_stream(cfg)`` generates the same chunks on one device, for the equality checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ppdit.model import build_model
from ppdit.runtime.launch import RankContext, launch
from ppdit.runtime.trace import Trace, Tracer, merge
from ppdit.sampler import Request, prompt_embeddings
from ppdit.serve.causal import ChunkGenerator
from ppdit.serve.config import BringupConfig
from ppdit.serve.controller import Controller, ControllerReport
from ppdit.serve.mesh import Mesh, MeshReport


def setup_bringup(rank: int, world_size: int, cfgs, rounds: int = 1):
    """Before the process group exists: the VAE on rank 0, the DiT on every mesh rank."""
    cfg = cfgs[0]
    if rank == 0:
        if all(c.vae_preset is None for c in cfgs):
            return None
        from ppdit.vae_presets import build_vae

        return build_vae(next(c.vae_preset for c in cfgs if c.vae_preset), seed=cfg.model_seed)
    return build_model(cfg.preset, seed=cfg.model_seed)


def bringup_worker(ctx: RankContext, cfgs, rounds: int = 1):
    """Rank 0 runs the controller, every other rank the mesh; each config ``rounds`` times,
    interleaved (so two phases can be compared on a shared machine)."""
    import torch.distributed as dist

    worlds = {c.world_size for c in cfgs}
    if worlds != {ctx.world_size} or len({(c.preset, c.model_seed) for c in cfgs}) != 1:
        raise ValueError(f"configs run together need one world size (launched with "
                         f"{ctx.world_size}, configs need {sorted(worlds)}) and one model")
    mesh_group = dist.new_group(list(range(1, ctx.world_size)))  # every rank must call this
    model = ctx.prepared.to(ctx.device) if ctx.rank > 0 else None
    if ctx.rank > 0 and cfgs[0].tp > 1:
        from ppdit.serve.pp1 import parallelize_mesh_model

        model = parallelize_mesh_model(model, mesh_group)
    out = [[] for _ in cfgs]
    for k in range(rounds):
        for i in [(k + j) % len(cfgs) for j in range(len(cfgs))]:
            tracer = Tracer(ctx.rank, ctx.placement)
            tracer.align()
            out[i].append((_run_one(ctx, cfgs[i], model, mesh_group, tracer), tracer.finish()))
    return out


def _run_one(ctx: RankContext, cfg: BringupConfig, model, mesh_group, tracer: Tracer):
    if ctx.rank == 0:
        vae = ctx.prepared.to(ctx.device) if cfg.vae_preset and ctx.prepared is not None else None
        return Controller(ctx, cfg, vae, tracer).run()
    channel = None
    if cfg.tp > 1:
        from ppdit.serve.pp1 import MeshChannel

        channel = MeshChannel(ctx, mesh_group)
    return Mesh(ctx, cfg, model, tracer, mesh_group, channel).run()


@dataclass
class BringupResult:
    """Everything a run produced."""

    cfg: BringupConfig
    controller: ControllerReport
    mesh: list[MeshReport]
    trace: Trace

    @property
    def fps(self) -> float:
        """Pixel frames delivered per second, from the first envelope to the last delivery."""
        frames = sum(d.frames for d in self.controller.delivered)
        last = max((d.t_ns for d in self.controller.delivered), default=self.controller.end_ns)
        return frames / ((last - self.controller.start_ns) / 1e9)

    @property
    def time_to_first_frame_s(self) -> float:
        """From the first envelope to the first chunk the output consumer took."""
        first = min(d.t_ns for d in self.controller.delivered)
        return (first - self.controller.start_ns) / 1e9

    def summary(self) -> dict:
        """Headline numbers (what the demo writes to summary.json)."""
        c = self.controller
        return {"phase": self.cfg.phase, "fps": self.fps,
                "time_to_first_frame_s": self.time_to_first_frame_s,
                "chunks_delivered": len(c.delivered), "dropped_stale_results": c.dropped_stale,
                "duplicate_envelopes_ignored": sum(m.duplicates for m in self.mesh),
                "max_queue_depth": c.max_depth, "producer_blocked_s": c.producer_blocked_s}


def run_bringup(cfg: BringupConfig, **launch_kwargs) -> BringupResult:
    """Launch the controller and the mesh (one thread each by default) and run ``cfg``."""
    return run_bringups({"run": cfg}, 1, **launch_kwargs)["run"][0]


def run_bringups(cfgs: dict[str, BringupConfig], rounds: int = 1,
                 **launch_kwargs) -> dict[str, list[BringupResult]]:
    """Several configs (same world size and model) in one launch, interleaved round by round."""
    launch_kwargs.setdefault("threads_per_rank", 1)
    worst = max(c.timeout_s for c in cfgs.values())
    launch_kwargs.setdefault("timeout_s", max(120.0, worst * 3 * len(cfgs) * rounds))
    ordered = tuple(cfgs.values())
    world = ordered[0].world_size
    per_rank = launch(bringup_worker, world, args=(ordered, rounds), setup=setup_bringup,
                      **launch_kwargs)
    out = {}
    for i, (name, cfg) in enumerate(cfgs.items()):
        out[name] = [BringupResult(cfg, per_rank[0][i][k][0],
                                   [r[i][k][0] for r in per_rank[1:]],
                                   merge([r[i][k][1] for r in per_rank]))
                     for k in range(rounds)]
    return out


def reference_stream(cfg: BringupConfig, model=None) -> dict[tuple[int, int], torch.Tensor]:
    """The chunks the system should deliver, generated on one device: (video, index) -> latent.

    Follows the same schedule (a cut resets the context) with the same seeds and prompts.
    """
    model = model or build_model(cfg.preset, seed=cfg.model_seed)
    gen = ChunkGenerator(model, cfg.stream())
    prompts = {v: prompt_embeddings(Request(v, s), cfg.preset) for v, s in enumerate(cfg.seeds)}
    out = {}
    for kind, video, index in cfg.schedule():
        if kind == "cut":
            gen.reset()
            continue
        out[(video, index)] = gen.generate(index, cfg.seeds[video], prompts[video])
    return out
