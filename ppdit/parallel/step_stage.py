"""What one step-split stage does on its rank: receive a group, run its steps, pass it on.

``step_split.py`` holds the plan and the entry points; this file is the per-rank loop. Rank r
serves replica ``r // P`` as stage ``r % P`` (P stages per pipeline, see ``StepSplitPlan``).
Phases of a "filled" stage, per group of requests: wait for a credit (stage 0, if in-flight
groups are capped) -> take (noise on stage 0, else a frame from the previous stage) -> run this
stage's steps, the last one writing straight into the outgoing frame -> give (send on, or keep
the result on the last stage and return a credit).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from ppdit.model import build_model
from ppdit.runtime.launch import RankContext
from ppdit.runtime.p2p import FrameReceiver, FrameSender, FrameSpec
from ppdit.runtime.trace import RankTrace, Tracer
from ppdit.sampler import Denoiser, Request, StepState

if TYPE_CHECKING:
    from ppdit.parallel.step_split import StepSplitPlan


@dataclass
class StageResult:
    """What one rank returns for one plan."""

    rank: int
    latents: dict[int, torch.Tensor]  # final latents by request id (last stages only)
    traces: list[RankTrace]  # one per round; empty on ranks the plan does not use
    boot_ns: dict[str, int] = field(default_factory=dict)  # how this rank came up


def setup_stage(rank: int, world_size: int, plans: Sequence[StepSplitPlan], rounds: int):
    """Runs before the process group exists: build this rank's (full) model."""
    return build_model(plans[0].preset, seed=plans[0].model_seed)


def step_split_worker(ctx: RankContext, plans: Sequence[StepSplitPlan], rounds: int
                      ) -> list[StageResult]:
    """Run every plan ``rounds`` times, interleaved (round k starts at plan k mod n).

    Interleaving is what makes ratios between plans trustworthy on a shared machine: a slow
    minute slows every plan, not just the one that happened to run then. Ranks a plan does
    not use sit its run out at the barrier.
    """
    model = (ctx.prepared or setup_stage(ctx.rank, ctx.world_size, plans, rounds)).to(ctx.device)
    dens = [Denoiser(model, p.preset, p.sampling) for p in plans]
    for den, plan in zip(dens, plans, strict=True):
        _warm_up(den, plan)
    boot = {**ctx.boot_ns, "warm-up": time.perf_counter_ns()}
    results = [StageResult(ctx.rank, {}, [], boot) for _ in plans]
    for k in range(rounds):
        for i in [(k + j) % len(plans) for j in range(len(plans))]:
            dist.barrier()
            if ctx.rank < plans[i].world_size:
                tracer = Tracer(ctx.rank, ctx.placement)
                results[i].latents = _Stage(ctx, plans[i], dens[i], tracer).run()
                results[i].traces.append(tracer.finish())
    return results


def _warm_up(den: Denoiser, plan: StepSplitPlan) -> None:
    """Pay first-call costs (allocator, kernel selection) before the clock starts."""
    probe = Request(-1, 0)
    batch = plan.micro_batch if plan.mode == "filled" else 1
    for _ in range(plan.warmup):
        den.step_batch([den.initial_state(probe, plan.shape)] * batch, [probe] * batch)
    den.release(probe)


class _Stage:
    """One rank's view of its pipeline: its steps, its requests, its neighbours, its channels."""

    def __init__(self, ctx: RankContext, plan: StepSplitPlan, den: Denoiser, tracer: Tracer):
        self.ctx, self.plan, self.den, self.tracer = ctx, plan, den, tracer
        p = plan.num_stages
        self.replica, self.stage = divmod(ctx.rank, p)
        base = self.replica * p  # global rank of this pipeline's stage 0
        self.steps = plan.stages[self.stage]
        self.groups = plan.groups(self.replica)
        self.is_first, self.is_last = self.stage == 0, self.stage == p - 1
        spec, t, dev = plan.frame_spec(), plan.timeout_s, ctx.device
        n_in = len(self.groups) if plan.mode == "filled" else sum(map(len, self.groups))
        self.inbox = None if self.is_first else FrameReceiver(spec, ctx.rank - 1, device=dev,
                                                              count=n_in, timeout_s=t)
        self.outbox = None if self.is_last else FrameSender(spec, ctx.rank + 1, device=dev,
                                                            timeout_s=t)
        credit, last = FrameSpec((1,), torch.int64, meta_slots=0), base + p - 1
        limited = plan.mode == "filled" and plan.max_in_flight is not None and p > 1
        n_credits = max(0, len(self.groups) - (plan.max_in_flight or 0))
        self.credits_in = (FrameReceiver(credit, last, device=dev, count=n_credits, timeout_s=t)
                           if limited and self.is_first else None)
        self.credits_out = (FrameSender(credit, base, device=dev, timeout_s=t)
                            if limited and self.is_last else None)
        self.finished_groups = 0

    def run(self) -> dict[int, torch.Tensor]:
        """Run this stage's share of the plan; the last stage returns the final latents."""
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
            latent, (rid, step) = self.inbox.recv(copy=self.plan.mode == "stream_batch")
        if (rid, step) != (first, self.steps.start):
            raise RuntimeError(f"rank {self.ctx.rank} expected request {first} at step "
                               f"{self.steps.start}, received request {rid} at step {step}")
        return [StepState(r.request_id, step, x)
                for r, x in zip(group, latent.chunk(len(group)), strict=True)]

    def give(self, states: Sequence[StepState], out: dict[int, torch.Tensor]) -> None:
        """Pass a group on, or keep its latents if this is the last stage."""
        first = states[0].request_id
        if not self.is_last:
            latent = states[0].latent if len(states) == 1 else torch.cat([s.latent for s in states])
            with self.tracer.span("send", f"r{first}", request=first, step=states[0].step_index):
                self.outbox.send(latent, [first, states[0].step_index])
            return
        for s in states:
            out[s.request_id] = s.latent.clone()  # it may live in a recycled buffer
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
            self._wait_for_credit(k)
            states = self.take(group)
            first, last = group[0].request_id, group[-1].request_id
            name = f"r{first}" if first == last else f"r{first}-{last}"
            # The last step writes into the outgoing frame: the handoff then copies nothing.
            frame = self.outbox.claim() if self.outbox is not None else None
            states = self.den.run(
                states, group, self.steps, out=frame,
                span=lambda i, n=name, r=first: self.tracer.span("compute", n, request=r, step=i))
            for r in group:
                self.den.release(r)
            self.give(states, out)
        return out

    def _wait_for_credit(self, k: int) -> None:
        """Stage 0 only: before group k, wait until group k - max_in_flight has finished."""
        if self.credits_in is not None and k >= self.plan.max_in_flight:
            with self.tracer.span("wait", "credit", group=k):
                self.credits_in.recv()

    def run_stream_batch(self) -> dict[int, torch.Tensor]:
        """Each tick: admit the next request, run one batched step for all held, pass one on."""
        out: dict[int, torch.Tensor] = {}
        requests = [r for g in self.groups for r in g]
        stream_batch_ticks(self.den, requests, self.steps, lambda r: self.take([r])[0],
                           lambda st: self.give([st], out), self.tracer.span)
        return out


def stream_batch_ticks(den: Denoiser, requests: list[Request], steps: range, take, give,
                       span=None) -> None:
    """The stream-batch schedule of one stage, shared by the ranks and the reference.

    Tick k: ``take`` request k (if any are left), run one batched step over every request held
    (each at its own step), then ``give`` away the oldest if it finished ``steps``. A stage thus
    holds at most ``len(steps)`` requests, and tick k's batch is fixed by k alone.
    """
    window: list[tuple[Request, StepState]] = []
    pending = list(requests)
    while pending or window:
        if pending:
            request = pending.pop(0)
            window.append((request, take(request)))
        reqs = [r for r, _ in window]
        with (span or _no_span)("compute", f"batch {len(window)}", batch=len(window),
                                requests=",".join(str(r.request_id) for r in reqs)):
            states = den.step_batch([s for _, s in window], reqs)
        window = list(zip(reqs, states, strict=True))
        if window[0][1].step_index == steps.stop:
            request, state = window.pop(0)
            den.release(request)
            give(state)


def _no_span(*args, **kwargs):
    return nullcontext()
