"""What one step-split stage does on its rank: receive a group, run its steps, pass it on.

Rank r serves replica ``dp`` as stage ``step`` of the plan's mesh (``ppdit.runtime.comm.mesh``),
and runs each forward with the stage's axes (``parallel.forward``: TP, sequence, FSDP, CFG).
Phases of a "filled" stage, per group of requests: wait for a credit (stage 0, if in-flight
groups are capped) -> take (noise on stage 0, else a frame from the previous stage) -> run this
stage's steps, the last one writing straight into the outgoing frame -> give (send on, or keep
the result on the last stage and return a credit).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

import torch

from ppdit.checkpoint.solver import step_experts
from ppdit.parallel.forward import StackRunner
from ppdit.parallel.layout import FORWARD
from ppdit.parallel.step_split import handoff
from ppdit.parallel.step_split.plan import StepSplitPlan
from ppdit.parallel.tensor.parallelize import local_param_count
from ppdit.runtime.comm.mesh import RankMesh
from ppdit.runtime.comm.wire import FrameReceiver, FrameSender, FrameSpec, work_bound
from ppdit.runtime.compile_cache import use_project_compile_cache
from ppdit.runtime.observe.timing import exchange, timed
from ppdit.runtime.observe.trace import Tracer, collectives_into
from ppdit.runtime.processes.rank import RankContext
from ppdit.sampler import Denoiser, Request, StepState


@dataclass
class StageInfo:
    """Where a rank sat in a plan and what it held (``Runner.result``)."""

    rank: int
    pp_rank: int  # the stage
    tp_rank: int
    forward_rank: int  # index among the stage's ranks (0 keeps the final latents)
    local_params: int  # parameters this rank holds (1/tp of the split layers under TP)
    warmup_s: float  # the untimed warm-up, torch.compile included when the plan compiles
    cache_log: list[tuple] = field(default_factory=list)  # a step cache's decisions, last round


class StepStageRunner(StackRunner):
    """Every plan of a side-by-side job on one rank (``ppdit.runtime.rounds``): a stage of each."""

    def __init__(self, ctx: RankContext, plans: Sequence[StepSplitPlan]):
        if any(p.compiled for p in plans):
            use_project_compile_cache()
        super().__init__(ctx, plans)
        self.warmup_s = [0.0] * len(plans)
        self.step_s = [0.0] * len(plans)  # one step's time, measured in warm-up (0: none)

    @staticmethod
    def experts_of(rank: int, plans: Sequence[StepSplitPlan]) -> list[int] | None:
        """Wan 2.2: only the experts of this rank's stages' steps (one, where the stages are
        cut at the boundary: half the weights per rank)."""
        if plans[0].sampling.boundary is None:
            return None
        need = set()
        for p in plans:
            coords = p.mesh().coords(rank)
            if coords is not None:
                experts = step_experts(p)
                need |= {experts[s] for s in p.stages[coords["step"]]}
        return sorted(need)

    def warm_up(self, i: int) -> None:
        """Pay first-call costs (allocator, kernel choice, compiles) before the clock starts.
        The ranks of a TP group warm up together: they issue the same collectives."""
        plan, den = self.plans[i], self.dens[i]
        probe = Request(-1, 0)
        if plan.prompts:  # the probe reads what a request reads (I2V: the image's channels)
            c = plan.prompts[0]
            den.condition_on(probe, c.text, c.null_text, c.image, c.channels)
        batch = plan.micro_batch if plan.mode == "filled" else 1
        state = _at_step(den.initial_state(probe, plan.shape),
                         plan.stages[self.meshes[i].stage].start)  # this stage's expert
        with self.stacks[i].round(None), timed(self.ctx.placement) as whole:
            for _ in range(plan.warmup):
                with timed(self.ctx.placement) as one:
                    den.step_batch([state] * batch, [probe] * batch)
                self.step_s[i] = one.seconds  # the last, warmest step: bounds the waits
        den.release(probe)
        self.warmup_s[i] = whole.seconds
        self._warm_pairs(i)

    def round_s(self, i: int) -> float:
        """Every step of every group one after another: no stage's round can take longer."""
        plan = self.plans[i]
        batch = plan.micro_batch if plan.mode == "filled" else 1
        groups = -(-len(plan.requests) // batch)
        return groups * plan.sampling.num_steps * self.step_s[i]

    def _warm_pairs(self, i: int) -> None:
        """One fused exchange with each neighbour (and, first and last stage, on the credits'
        group): NCCL builds a pair's communicator at its first message, and that belongs to
        the warm-up, not to the first timed round. Pairs go in one global order (prev before
        next, the credits' pair last), so no exchange waits in a cycle."""
        g, plan = self.meshes[i], self.plans[i]
        if plan.num_stages == 1 or plan.warmup == 0:  # warmup=0: the cold start, shown whole
            return
        pipe = g.group("step")
        pairs = [(g.prev_rank, pipe), (g.next_rank, pipe)]
        if g.prev_rank is None:
            pairs.append((g.last_stage_rank, g.back_group))
        elif g.next_rank is None:
            pairs.append((g.first_stage_rank, g.back_group))
        for peer, group in pairs:
            if peer is not None:
                exchange(peer, self.ctx.wire, group)

    def run(self, i: int, tracer: Tracer) -> dict[int, torch.Tensor]:
        """One round: this stage's share of plan ``i``; the last stage returns final latents."""
        if self.dens[i].cache is not None:
            self.dens[i].cache.log.clear()  # the round's decisions (``result``)
        with self.stacks[i].round(tracer) as stack:
            return _Stage(self.ctx, self.plans[i], self.dens[i], self.meshes[i], tracer,
                          self.step_s[i], step_spans=not stack.draws_compute).run()

    def result(self, i: int) -> StageInfo:
        g = self.meshes[i]
        cache = self.dens[i].cache
        return StageInfo(self.ctx.rank, g.stage, g.coords["tp"],
                         g.index(*FORWARD), local_param_count(self.dens[i].model),
                         self.warmup_s[i], [] if cache is None else list(cache.log))


def _at_step(state: StepState, step: int) -> StepState:
    """A probe's noise posed at ``step`` (its solver memory empty, as if it started there)."""
    memory = None if state.solver_state is None else {**state.solver_state, "step_index": step}
    return replace(state, step_index=step, solver_state=memory)


class _Stage:
    """One rank's view of its pipeline: its steps, its requests, its neighbours, its channels."""

    def __init__(self, ctx: RankContext, plan: StepSplitPlan, den: Denoiser, mesh: RankMesh,
                 tracer: Tracer, step_s: float = 0.0, step_spans: bool = True):
        """``step_spans``: a compute span per step (False where the forward draws its own,
        ``ForwardStack.draws_compute``: busy time would count twice)."""
        self.ctx, self.plan, self.den, self.tracer = ctx, plan, den, tracer
        self.step_span = tracer.span if step_spans else None
        self.steps = plan.stages[mesh.stage]
        self.groups = plan.groups(mesh.coords["dp"])
        self.is_first, self.is_last = mesh.prev_rank is None, mesh.next_rank is None
        self.solver = plan.handoff_solver()  # whose memory travels with the latent
        slots, shape = plan.cache_slots()  # a step cache's state travels too
        self.cache = None if not slots else (slots, shape, den.model.dtype)
        spec, pg = plan.frame_spec(), mesh.group("step")
        n_in = len(self.groups) if plan.mode == "filled" else sum(map(len, self.groups))
        # Waits are bounded by the work that must happen first (``wire.work_bound``): every
        # group through the stages upstream for a frame, through the whole pipeline for a
        # credit. Every stage runs the same model on the same shape: this rank's step time
        # stands for theirs.
        upstream = sum(len(plan.stages[s]) for s in range(mesh.stage)) * n_in
        t_in = work_bound(plan.timeout_s, upstream, step_s)
        t_credit = work_bound(plan.timeout_s, plan.stages[-1].stop * len(self.groups), step_s)
        # Each rank of a stage holds the same latent and hands it to its counterpart.
        self.inbox = None if self.is_first else FrameReceiver(
            spec, mesh.prev_rank, ctx.wire, group=pg, count=n_in, timeout_s=t_in)
        self.outbox = None if self.is_last else FrameSender(
            spec, mesh.next_rank, ctx.wire, group=pg, timeout_s=t_credit)
        credit = FrameSpec((1,), torch.int64, meta_slots=0)
        limited = plan.mode == "filled" and plan.max_in_flight is not None and plan.num_stages > 1
        n_credits = max(0, len(self.groups) - (plan.max_in_flight or 0))
        back = mesh.back_group  # credits' own communicator: see RankMesh.back_group
        self.credits_in = (FrameReceiver(credit, mesh.last_stage_rank, ctx.wire, group=back,
                                         count=n_credits, timeout_s=t_credit)
                           if limited and self.is_first else None)
        self.credits_out = (FrameSender(credit, mesh.first_stage_rank, ctx.wire, group=back,
                                        timeout_s=t_credit)
                            if limited and self.is_last else None)
        self.finished_groups = 0
        self.reports_progress = mesh.index(*FORWARD) == 0  # one event per request

    def run(self) -> dict[int, torch.Tensor]:
        """Run this stage's share of the plan; the last stage returns the final latents."""
        with collectives_into(self.tracer):  # a TP stage's all-reduces show on its lane
            out = self.run_filled() if self.plan.mode == "filled" else self.run_stream_batch()
        for box in (self.outbox, self.credits_out):
            if box is not None:
                box.flush()
        return out

    # -- receiving and sending one group ----------------------------------------------------

    def take(self, group: Sequence[Request]) -> list[StepState]:
        """The group's states at this stage's first step: fresh noise, or the handoff."""
        if self.is_first:
            return [self.den.initial_state(r, self.plan.shape) for r in group]
        first = group[0].request_id
        with self.tracer.span("recv", f"r{first}", request=first, step=self.steps.start):
            # Stream batch holds a request for several ticks: keep a copy, not a ring-buffer view.
            frame, meta = self.inbox.recv(copy=self.plan.mode == "stream_batch")
        rid, step = meta[:2]
        if (rid, step) != (first, self.steps.start):
            raise RuntimeError(f"rank {self.ctx.rank} expected request {first} at step "
                               f"{self.steps.start}, received request {rid} at step {step}")
        states = handoff.unpack(self.solver, frame, meta, group, self.cache)
        if self.cache is not None:
            self.den.cache.load(first, states[0].cache_state[1])
        return states

    def give(self, states: Sequence[StepState], out: dict[int, torch.Tensor]) -> None:
        """Pass a group on (latents and solver memory in one frame); the last stage keeps it."""
        first = states[0].request_id
        if not self.is_last:
            with self.tracer.span("send", f"r{first}", request=first, step=states[0].step_index):
                frame = self.outbox.claim()
                self.outbox.send(frame, handoff.pack(self.solver, states, frame,
                                                     self.cache[0] if self.cache else 0))
            return
        for s in states:
            out[s.request_id] = s.latent.clone()  # it may live in a recycled buffer
            if self.reports_progress:
                self.ctx.emit(("done", s.request_id))
        self.finished_groups += 1
        # Group k's credit lets stage 0 start group k + max_in_flight, if there is one.
        if (self.credits_out is not None
                and self.finished_groups + self.plan.max_in_flight <= len(self.groups)):
            self.credits_out.send(torch.ones(1, dtype=torch.int64, device=self.ctx.device), [])

    # -- the two schedules ------------------------------------------------------------------

    def run_filled(self) -> dict[int, torch.Tensor]:
        """Groups in order; up to ``max_in_flight`` of them inside the pipeline at once."""
        out: dict[int, torch.Tensor] = {}
        for k, group in enumerate(self.groups):
            if self.credits_in is not None and k >= self.plan.max_in_flight:
                with self.tracer.span("wait", "credit", group=k):  # for group k - max_in_flight
                    self.credits_in.recv()
            states = self.take(group)
            first, last = group[0].request_id, group[-1].request_id
            name = f"r{first}" if first == last else f"r{first}-{last}"
            # The last step writes into the outgoing frame: the handoff then copies nothing.
            frame = self.outbox.claim()[0] if self.outbox is not None else None
            span = None if self.step_span is None else (
                lambda i, n=name, r=first: self.step_span("compute", n, request=r, step=i))
            states = self.den.run(states, group, self.steps, out=frame, on_step=self._report,
                                  span=span)
            if self.cache is not None and not self.is_last:  # the next stage's expert's state
                expert = self.den.experts[self.steps.stop]
                kept = self.den.cache.export(first)
                states = [replace(states[0], cache_state=(expert, {
                    k: v for k, v in kept.items() if k[0] == expert}))]
            for r in group:
                self.den.release(r)
            self.give(states, out)
        return out

    def _report(self, step: int) -> None:
        """A progress event per step (``plan.report_steps``), from one rank per stage."""
        if self.plan.report_steps and self.reports_progress:
            self.ctx.emit(("step", step))

    def run_stream_batch(self) -> dict[int, torch.Tensor]:
        """Each tick: admit the next request, run one batched step for all held, pass one on."""
        out: dict[int, torch.Tensor] = {}
        requests = [r for g in self.groups for r in g]
        stream_batch_ticks(self.den, requests, self.steps, lambda r: self.take([r])[0],
                           lambda st: self.give([st], out), self.step_span)
        return out


def stream_batch_ticks(den: Denoiser, requests: list[Request], steps: range, take, give,
                       span=None) -> None:
    """The stream-batch schedule of one stage, shared by the ranks and the reference.

    Tick k: ``take`` request k (if any are left), run one batched step over every request held
    (each at its own step), then ``give`` away the oldest if it finished ``steps``. A stage thus
    holds at most ``len(steps)`` requests, and tick k's batch is fixed by k alone."""
    span = span or (lambda *args, **meta: nullcontext())
    window: list[tuple[Request, StepState]] = []
    pending = list(requests)
    while pending or window:
        if pending:
            request = pending.pop(0)
            window.append((request, take(request)))
        reqs = [r for r, _ in window]
        with span("compute", f"batch {len(window)}", batch=len(window),
                  requests=",".join(str(r.request_id) for r in reqs)):
            states = den.step_batch([s for _, s in window], reqs)
        window = list(zip(reqs, states, strict=True))
        if window[0][1].step_index == steps.stop:
            request, state = window.pop(0)
            den.release(request)
            give(state)
