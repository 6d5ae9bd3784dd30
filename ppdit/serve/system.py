"""The bring-up system end to end: launch rank 0 + the mesh, run a stream, collect everything.

``run_bringup(cfg)`` returns a ``BringupResult``: the latents and pixels rank 0 delivered, its
queue and drop statistics, each mesh rank's report, and the merged trace.
``reference_stream(cfg)`` generates the same chunks on one device, for the equality checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ppdit.parallel.share import check_plans
from ppdit.parallel.tensor.parallelize import parallelize_wan
from ppdit.runtime.comm.mesh import Mesh, build_lanes
from ppdit.runtime.observe.trace import Trace
from ppdit.runtime.processes.rank import RankContext
from ppdit.runtime.rounds import Runner, run_side_by_side
from ppdit.serve.causal import ChunkGenerator
from ppdit.serve.config import CONTROLLER, LEADER, BringupConfig
from ppdit.serve.controller import Controller, ControllerReport
from ppdit.serve.generator import GeneratorRank, GeneratorReport
from ppdit.serve.pp1 import MeshChannel


class BringupRunner(Runner):
    """Rank 0 runs the controller, every other rank the generator mesh, for each config."""

    check = staticmethod(check_plans)

    @staticmethod
    def prepare(rank: int, world_size: int, cfgs: Sequence[BringupConfig]):
        """Before the process group exists: the VAE on rank 0, the DiT on every mesh rank."""
        if rank > 0:
            return cfgs[0].source.dit()
        decoding = next((c for c in cfgs if c.decode), None)
        return None if decoding is None else decoding.source.vae()

    def __init__(self, ctx: RankContext, cfgs: Sequence[BringupConfig]):
        super().__init__(ctx, cfgs)
        worlds = {c.world_size for c in cfgs}  # one model: checked by run_side_by_side
        if worlds != {ctx.world_size}:
            raise ValueError(f"configs run together need one world size (launched with "
                             f"{ctx.world_size}, configs need {sorted(worlds)})")
        # rank 0 outside, ranks 1..N one TP group: the generator mesh (every rank takes part)
        mesh = Mesh.of(first_rank=1, tp=ctx.world_size - 1).build(ctx.rank)
        self.mesh_group = None if mesh is None else mesh.group("tp")
        # Envelopes go down one communicator, results come back on another: see Controller.
        self.lanes = build_lanes([CONTROLLER, LEADER])
        prepared = ctx.prepared
        if prepared is None and (ctx.rank > 0 or any(c.decode for c in cfgs)):
            prepared = self.prepare(ctx.rank, ctx.world_size, cfgs)
        self.module = None if prepared is None else prepared.to(ctx.device)
        if ctx.rank > 0 and self.mesh_group is not None:
            self.module = parallelize_wan(self.module, tp_group=self.mesh_group,
                                          wire=ctx.wire)  # funcol collectives

    def run(self, i: int, tracer):
        """One stream: the controller's report on rank 0, a mesh rank's report elsewhere."""
        cfg = self.plans[i]
        if self.ctx.rank == 0:
            return Controller(self.ctx, cfg, self.module if cfg.decode else None,
                              tracer, self.lanes).run()
        channel = None if self.mesh_group is None else MeshChannel(self.ctx, self.mesh_group)
        return GeneratorRank(self.ctx, cfg, self.module, tracer, self.mesh_group,
                             channel, self.lanes).run()


@dataclass
class BringupResult:
    """Everything a run produced."""

    cfg: BringupConfig
    controller: ControllerReport
    mesh: list[GeneratorReport]  # ranks 1..N
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
    """Launch the controller and the mesh (one thread each by default) and run ``cfg``
    (``None`` on torchrun ranks other than 0)."""
    out = run_bringups({"run": cfg}, 1, **launch_kwargs)
    return None if out is None else out["run"][0]


def run_bringups(cfgs: dict[str, BringupConfig], rounds: int = 1,
                 **launch_kwargs) -> dict[str, list[BringupResult]] | None:
    """Several configs (same world size and model) in one launch, interleaved round by round."""
    worst = max(c.timeout_s for c in cfgs.values())
    launch_kwargs.setdefault("timeout_s", max(120.0, worst * 3 * len(cfgs) * rounds))
    world = next(iter(cfgs.values())).world_size
    runs = run_side_by_side(cfgs, runner=BringupRunner, world_size=world, rounds=rounds,
                            **launch_kwargs)
    if runs is None:
        return None
    return {name: [BringupResult(cfg, runs[name].outputs[0][k],
                                 [runs[name].outputs[r][k] for r in range(1, world)],
                                 runs[name].traces[k]) for k in range(rounds)]
            for name, cfg in cfgs.items()}


def reference_stream(cfg: BringupConfig, model=None, device: str | torch.device = "cpu"
                     ) -> dict[tuple[int, int], torch.Tensor]:
    """The chunks the system should deliver, generated on one device (``model``'s, else a new
    model built on ``device``): (video, index) -> latent.

    Follows the same schedule (a cut resets the context) with the same seeds and prompts.
    """
    model = model or cfg.source.dit(device)
    gen = ChunkGenerator(model, cfg.stream())
    prompts = cfg.prompt_embeddings()
    out = {}
    for kind, video, index in cfg.schedule():
        if kind == "cut":
            gen.reset()
            continue
        out[(video, index)] = gen.generate(index, cfg.seeds[video], prompts[video])
    return out
