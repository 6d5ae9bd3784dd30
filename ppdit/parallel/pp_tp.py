"""PP x TP: step-split pipeline stages, each of which is a tensor-parallel group.

With ``pp`` stages of ``tp`` ranks (``world_size = pp * tp``), rank ``r`` is stage ``r // tp``,
TP rank ``r % tp``. For pp = 2, tp = 2::

                 TP group (all-reduces every block)
    stage 0:   rank 0  ==  rank 1        steps [0, n/2)
                 |           |           each TP rank sends the latent to its counterpart:
                 v           v           PP group {0, 2} and PP group {1, 3}
    stage 1:   rank 2  ==  rank 3        steps [n/2, n)

Every TP rank ends a step with the same latent (the all-reduces hand every rank the same sum
and everything else is replicated), so each can send it to its counterpart in the next stage;
no broadcast inside the group is needed. (The alternative, a leader that sends and then
broadcasts in its group, moves the latent once instead of ``tp`` times but adds a collective to
every handoff; for a latent of a few hundred KB the parallel sends are the simpler choice.)

The groups: ``dist.new_group`` is itself a collective over the whole world, so *every* rank
creates *every* group, in the same order, including groups it is not a member of; then each
rank keeps its own. After that, a stage's ranks issue the same TP collectives in the same order
on their group (they run the same steps of the same requests) and never touch the other
stage's group; P2P handoffs use the PP group. Ranks of different stages work on different
requests at the same time: the pipeline fills as in ``step_split``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ppdit.model import build_model, get_preset
from ppdit.parallel.step_split import split_steps
from ppdit.parallel.tensor import (
    ParallelDims,
    check_tp_degree,
    compile_blocks,
    local_param_count,
    parallelize_wan,
)
from ppdit.runtime.compile_cache import use_project_compile_cache
from ppdit.runtime.launch import RankContext, launch
from ppdit.runtime.p2p import FrameReceiver, FrameSender, FrameSpec
from ppdit.runtime.trace import RankTrace, Trace, Tracer, merge
from ppdit.sampler import Denoiser, Request, SamplingConfig, StepState


@dataclass(frozen=True)
class PPxTPPlan:
    """Requests, the 2-D arrangement and the step split; identical on every rank."""

    requests: tuple[Request, ...]
    dims: ParallelDims
    stages: tuple[range, ...]  # one contiguous step range per pipeline stage
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    preset: str = "tiny"
    model_seed: int = 0
    collectives: str = "funcol"
    compiled: bool = False  # torch.compile(fullgraph=True) every TP block
    warmup: int = 1  # untimed steps per rank before the timed run
    timeout_s: float = 120.0  # bound on every P2P wait

    def __post_init__(self) -> None:
        check_tp_degree(build_model(self.preset, device="meta").config, self.dims.tp)
        if len(self.stages) != self.dims.pp:
            raise ValueError(f"{len(self.stages)} step ranges for pp={self.dims.pp} stages")
        if [i for r in self.stages for i in r] != list(range(self.sampling.num_steps)):
            raise ValueError(f"stages {list(self.stages)} must cover steps "
                             f"0..{self.sampling.num_steps - 1} contiguously")

    @property
    def shape(self) -> tuple[int, ...]:
        """The latent shape (the preset's default)."""
        return tuple(get_preset(self.preset).latent_shape)


def make_pp_tp_plan(pp: int, tp: int, num_requests: int = 2, *,
                    sampling: SamplingConfig | None = None, **kwargs) -> PPxTPPlan:
    """A plan for ``num_requests`` requests (seed = id) on ``pp`` stages of ``tp`` ranks."""
    sampling = sampling or SamplingConfig(num_steps=4)
    requests = tuple(Request(i, i) for i in range(num_requests))
    return PPxTPPlan(requests, ParallelDims(pp, tp, pp * tp),
                     tuple(split_steps(sampling.num_steps, pp)), sampling, **kwargs)


@dataclass(frozen=True)
class RankMesh:
    """One rank's place in the pp x tp arrangement and the groups it talks on."""

    rank: int
    pp_rank: int  # stage index
    tp_rank: int  # index inside the stage's TP group
    tp_group: dist.ProcessGroup  # this stage's ranks
    pp_group: dist.ProcessGroup  # this rank and its counterparts in the other stages
    prev_rank: int | None  # global rank of the counterpart in the previous stage
    next_rank: int | None  # ... in the next stage


def build_mesh(dims: ParallelDims, rank: int) -> RankMesh:
    """Create every TP group, then every PP group, on every rank in the same order; keep ours."""
    if dist.get_world_size() != dims.world_size:
        raise ValueError(f"pp x tp = {dims.pp} x {dims.tp} = {dims.pp * dims.tp} ranks, but "
                         f"the process group has {dist.get_world_size()}")
    pp_rank, tp_rank = divmod(rank, dims.tp)
    tp_groups = [dist.new_group([s * dims.tp + j for j in range(dims.tp)]) for s in range(dims.pp)]
    pp_groups = [dist.new_group([s * dims.tp + j for s in range(dims.pp)]) for j in range(dims.tp)]
    return RankMesh(rank, pp_rank, tp_rank, tp_groups[pp_rank], pp_groups[tp_rank],
                    rank - dims.tp if pp_rank > 0 else None,
                    rank + dims.tp if pp_rank < dims.pp - 1 else None)


@dataclass
class PPxTPRankResult:
    """What one rank returns."""

    rank: int
    pp_rank: int
    tp_rank: int
    latents: dict[int, torch.Tensor]  # final latents (last stage only)
    trace: RankTrace
    local_params: int
    compile_s: float = 0.0  # first (warm-up) step, compile included when ``compiled``


def pp_tp_worker(ctx: RankContext, plan: PPxTPPlan) -> PPxTPRankResult:
    """Build the groups, shard the model over this stage's TP group, run this stage's steps."""
    use_project_compile_cache()
    mesh = build_mesh(plan.dims, ctx.rank)
    model = build_model(plan.preset, seed=plan.model_seed).to(ctx.device)
    model = parallelize_wan(model, tp_group=mesh.tp_group, collectives=plan.collectives)
    if plan.compiled:
        compile_blocks(model)
    den = Denoiser(model, plan.preset, plan.sampling)
    start = time.perf_counter()
    probe = Request(-1, 0)
    for _ in range(plan.warmup):  # every rank of a TP group warms up together: same collectives
        den.step(den.initial_state(probe, plan.shape), probe)
    den.release(probe)
    compile_s = time.perf_counter() - start
    dist.barrier()  # start the timed run together
    tracer = Tracer(ctx.rank, ctx.placement)
    latents = _run_stage(ctx, plan, mesh, den, tracer)
    return PPxTPRankResult(ctx.rank, mesh.pp_rank, mesh.tp_rank, latents, tracer.finish(),
                           local_param_count(model), compile_s)


def _run_stage(ctx: RankContext, plan: PPxTPPlan, mesh: RankMesh, den: Denoiser,
               tracer: Tracer) -> dict[int, torch.Tensor]:
    """Requests in order: take (noise, or the counterpart's frame) -> this stage's steps -> give."""
    steps = plan.stages[mesh.pp_rank]
    spec, dev, t = FrameSpec(plan.shape, torch.float32, meta_slots=2), ctx.device, plan.timeout_s
    inbox = (None if mesh.prev_rank is None else
             FrameReceiver(spec, mesh.prev_rank, device=dev, group=mesh.pp_group,
                           count=len(plan.requests), timeout_s=t))
    outbox = (None if mesh.next_rank is None else
              FrameSender(spec, mesh.next_rank, device=dev, group=mesh.pp_group, timeout_s=t))
    out: dict[int, torch.Tensor] = {}
    for request in plan.requests:
        rid = request.request_id
        if inbox is None:
            state = den.initial_state(request, plan.shape)
        else:
            with tracer.span("recv", f"r{rid}", request=rid):
                latent, (got, step) = inbox.recv()
            if (got, step) != (rid, steps.start):
                raise RuntimeError(f"rank {ctx.rank} expected request {rid} at step "
                                   f"{steps.start}, got request {got} at step {step}")
            state = StepState(rid, step, latent)  # a ring-buffer view; only read this step
        [state] = den.run([state], [request], steps, span=lambda i, r=rid: tracer.span(
            "compute", f"r{r}", request=r, step=i, stage=mesh.pp_rank))
        den.release(request)
        if outbox is None:
            out[rid] = state.latent.clone()
        else:
            with tracer.span("send", f"r{rid}", request=rid):
                outbox.send(state.latent, [rid, state.step_index])
    if outbox is not None:
        outbox.flush()
    return out


@dataclass
class PPxTPResult:
    """The merged run: final latents of every TP rank of the last stage, and the timeline."""

    plan: PPxTPPlan
    per_rank: list[PPxTPRankResult]

    @property
    def latents(self) -> dict[int, torch.Tensor]:
        """Final latents as the last stage's TP rank 0 holds them."""
        return next(r.latents for r in self.per_rank
                    if r.pp_rank == self.plan.dims.pp - 1 and r.tp_rank == 0)

    @property
    def trace(self) -> Trace:
        """All ranks on one timeline."""
        return merge([r.trace for r in self.per_rank])


def run_pp_tp(plan: PPxTPPlan, **launch_kwargs) -> PPxTPResult:
    """Launch ``pp * tp`` ranks (one thread each unless told otherwise) and run ``plan``."""
    use_project_compile_cache()
    launch_kwargs.setdefault("threads_per_rank", 1)
    launch_kwargs.setdefault("timeout_s", 300)
    return PPxTPResult(plan, launch(pp_tp_worker, plan.dims.world_size, args=(plan,),
                                    **launch_kwargs))


__all__ = ["PPxTPPlan", "PPxTPRankResult", "PPxTPResult", "RankMesh", "build_mesh",
           "make_pp_tp_plan", "pp_tp_worker", "run_pp_tp"]
