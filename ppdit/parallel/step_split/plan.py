"""Step-split pipeline parallelism: stage s runs a contiguous slice of the denoising steps.

Every stage holds every block (a forward axis inside a stage, e.g. TP, may still shard them).
A request's latent enters stage 0 as noise, each stage runs its steps, and the ``StepState``
(latent + step index, see ``ppdit.sampler``) moves on::

    steps:   0 1 2 3 4 5 6          (7 steps over 3 stages: 3 + 2 + 2)
    stage 0: [0 1 2] --latent-->
    stage 1:         [3 4] --latent-->
    stage 2:               [5 6] -> final latent

One request alone gains nothing: the stages run one after another. The gain is *pipeline
filling*: with R requests in flight, stage 1 works on request r while stage 0 starts r + 1, so
throughput approaches P times one device, ``R P / (R + P - 1)`` of it for R requests. Two modes:

* ``"filled"``: each stage takes requests in order, ``micro_batch`` at a time (one group moves
  as one batch); ``max_in_flight`` caps the groups inside the pipeline (1 = no filling), the
  last stage returning a credit to stage 0 per finished group.
* ``"stream_batch"``: a stage runs up to one request per step of its slice as one batch, each at
  its own timestep (StreamDiffusion's *stream batch*): arithmetic efficiency for bitwise equality.

Splits are contiguous, balanced by step count (``split_steps``) or per-step cost (``weights``).
``stage`` (a ``Layout`` of forward axes) says how a stage's ranks run one forward
(``parallel.forward``); with ``stage=Layout(tp=2)``, rank r is stage r // 2, TP rank r % 2::

                 TP group (all-reduces every block)
    stage 0:   rank 0  ==  rank 1        steps [0, n/2)
                 |           |           each TP rank sends the latent to its counterpart:
                 v           v           PP group {0, 2} and PP group {1, 3}
    stage 1:   rank 2  ==  rank 3        steps [n/2, n)

Every rank of a stage ends a step with the same latent, so each sends it to its counterpart: no
broadcast inside the stage (which would move the latent once, but add a collective to every
handoff). A stage's ranks run the same steps of the same requests, so they issue the same
collectives in the same order, and never touch another stage's groups.

The same plan runs a pipeline folder (``source`` a folder, ``solver="folder"``, ``cfg="split"``,
``prompts`` its embeddings: ``ppdit generate --layout step``): the folder's multistep solver's
memory travels in the frame beside the latent (``handoff.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from ppdit.checkpoint.solver import SchedulerSolver, step_experts
from ppdit.checkpoint.source import ModelPlan, ModelSource
from ppdit.parallel.forward import ForwardOptions
from ppdit.parallel.layout import Layout, check_step_stages
from ppdit.parallel.partition import balanced_sizes, even_sizes, expert_sizes, to_ranges
from ppdit.runtime.comm.wire import FrameSpec
from ppdit.sampler import Conditioning, Request, SamplingConfig, check_cfg

MODES = ("filled", "stream_batch")
CACHE_TENSORS, CACHE_META = 4, 3  # 2 branches x (head, rest) residuals; expert + 2 flags


def split_steps(num_steps: int, num_stages: int,
                weights: Sequence[float] | None = None) -> list[range]:
    """Contiguous step ranges, one per stage, each at least one step: sizes differing by at
    most one, or with ``weights`` (a cost per step) the split whose most expensive stage, what
    bounds a filled pipeline's throughput, is cheapest (``partition.balanced_sizes``)."""
    if num_stages < 1:
        raise ValueError(f"num_stages={num_stages} must be >= 1")
    check_step_stages(num_steps, num_stages)
    if weights is None:
        return to_ranges(even_sizes(num_steps, num_stages))
    if len(weights) != num_steps or any(w <= 0 for w in weights):
        raise ValueError(f"weights must hold {num_steps} positive per-step costs, "
                         f"got {len(weights)} values (min {min(weights, default=0)})")
    return to_ranges(balanced_sizes(list(weights), num_stages))


def expert_stages(experts: Sequence[int], num_stages: int) -> list[range]:
    """Stages that never straddle Wan 2.2's expert boundary (``experts``: each step's, as
    ``checkpoint.solver.step_experts`` says): each loads one expert (``partition.expert_sizes``)."""
    check_step_stages(len(experts), num_stages)
    return to_ranges(expert_sizes(experts, num_stages))


@dataclass(frozen=True)
class StepSplitPlan(ForwardOptions, ModelPlan):
    """Everything every stage must agree on; picklable, sent to each spawned rank."""

    requests: tuple[Request, ...]
    stages: tuple[range, ...]
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    source: ModelSource = field(default_factory=ModelSource)  # the weights every rank builds
    latent_shape: tuple[int, ...] | None = None  # None: the source's default
    solver: str = "euler"  # or "folder": its scheduler's memory travels (UniPC: 3 latents)
    cfg: str = "batched"  # guided steps: one batch, or WanPipeline's two forwards ("split")
    prompts: tuple[Conditioning, ...] | None = None  # one per request; None: seeded stand-ins
    mode: str = "filled"
    micro_batch: int = 1  # "filled": requests that travel together as one batch
    max_in_flight: int | None = None  # "filled": groups inside the pipeline; None = no limit
    # Independent copies of the pipeline, requests dealt round-robin: replicas x stages ranks.
    # One stage and two replicas is plain data parallelism, the baseline step split must beat.
    replicas: int = 1
    warmup: int = 1  # untimed forwards per rank before the timed run (0 shows the cold start)
    timeout_s: float = 120.0  # floor of every P2P wait, above the work before it (work_bound)
    stage: Layout = field(default_factory=Layout)  # every stage's forward axes (module docstring)
    report_steps: bool = False  # "filled": each stage emits ("step", i) events (a progress bar)

    def __post_init__(self) -> None:
        self.check_workload()
        check_cfg(self.cfg)
        if self.stage.pipeline is not None:
            raise ValueError(f"stage={self.stage}: a stage runs forward axes only (its steps "
                             "are the pipeline)")
        if self.mode not in MODES:
            raise ValueError(f"mode={self.mode!r} is not one of {MODES}")
        if not self.requests:
            raise ValueError("a plan needs at least one request")
        if len({r.request_id for r in self.requests}) != len(self.requests):
            raise ValueError("request ids must be unique")
        steps = [i for r in self.stages for i in r]
        if steps != list(range(self.sampling.num_steps)) or any(len(r) == 0 for r in self.stages):
            raise ValueError(f"stages {list(self.stages)} must cover steps "
                             f"0..{self.sampling.num_steps - 1} contiguously, each once, "
                             "at least one step per stage")
        if self.micro_batch < 1:
            raise ValueError(f"micro_batch={self.micro_batch} must be >= 1")
        if self.mode == "stream_batch" and self.micro_batch != 1:
            raise ValueError("stream_batch forms its own batches: micro_batch must be 1")
        if self.max_in_flight is not None and self.max_in_flight < 1:
            raise ValueError(f"max_in_flight={self.max_in_flight} must be >= 1 (or None)")
        if self.replicas < 1 or self.warmup < 0:
            raise ValueError(f"replicas={self.replicas} must be >= 1, warmup={self.warmup} >= 0")
        self.check_forward()
        if self.cache is not None and (self.mode != "filled" or self.micro_batch != 1):
            raise ValueError(f"step caching decides per request: mode={self.mode!r} with "
                             f"micro_batch={self.micro_batch} batches several (use 'filled', 1)")
        if len(self.requests) % (self.replicas * self.micro_batch):
            raise ValueError(f"{len(self.requests)} requests cannot be dealt to replicas="
                             f"{self.replicas} in groups of micro_batch={self.micro_batch}")

    @property
    def num_stages(self) -> int:
        """P, the pipeline's stages."""
        return len(self.stages)

    @property
    def layout(self) -> Layout:
        """The whole layout: the stages, each running the ``stage`` axes."""
        return replace(self.stage, step=self.num_stages)

    @property
    def world_size(self) -> int:
        """Ranks the plan runs on: replicas x stages x the ranks of a stage."""
        return self.replicas * self.num_stages * self.stage.ranks

    def mesh(self):
        """The rank grid: dp = replicas, step = stages, then the stage's forward axes."""
        return self.layout.mesh(dp=self.replicas, ranks_per_node=self.ranks_per_node)

    def groups(self, replica: int = 0) -> list[tuple[Request, ...]]:
        """A replica's requests (every ``replicas``-th) in pipeline order, by ``micro_batch``."""
        mine, g = self.requests[replica::self.replicas], self.micro_batch
        return [mine[i:i + g] for i in range(0, len(mine), g)]

    def handoff_solver(self) -> SchedulerSolver | None:
        """The solver whose memory a handoff carries (None: Euler carries none)."""
        if self.solver != "folder":
            return None
        return SchedulerSolver(self.source.scheduler(), self.sampling.num_steps)

    def handoff_bytes(self) -> dict[str, int]:
        """One request's bytes in a handoff frame: the latent, each slot of solver memory, and
        a step cache's state (``cache_slots``)."""
        latent = torch.Size(self.shape).numel() * 4  # fp32
        solver = self.handoff_solver()
        names = [] if solver is None else solver.slot_names()
        cache = {"cache state": latent * self.cache_slots()[0]} if self.cache is not None else {}
        return {"latent": latent, **{n: latent for n in names}, **cache}

    def cache_slots(self) -> tuple[int, tuple[int, int, int]]:
        """A step cache's state in the frame: (latent-sized slots, the (1, tokens, D) of each of
        its ``handoff.CACHE_TENSORS`` tensors: a rank's token slice, the longest)."""
        if self.cache is None:
            return 0, (1, 0, 0)
        tokens = even_sizes(self.preset.num_tokens(self.shape), self.stage.sp)[0]
        per = -(-tokens * self.preset.dim // torch.Size(self.shape).numel())
        return CACHE_TENSORS * per, (1, tokens, self.preset.dim)

    def frame_spec(self) -> FrameSpec:
        """The handoff frame (``handoff.py``), fp32 whatever the model's dtype (as diffusers)."""
        b, *rest = self.shape
        solver = self.handoff_solver()
        slots = 1 + (0 if solver is None else solver.wire_tensors) + self.cache_slots()[0]
        meta = 2 + (0 if solver is None else len(solver.to_wire(solver.initial_state())[1])
                    + solver.wire_tensors) + (CACHE_META if self.cache is not None else 0)
        return FrameSpec((slots, b * self.micro_batch, *rest), torch.float32, meta_slots=meta)


def make_plan(num_stages: int, num_requests: int = 1, *, sampling: SamplingConfig | None = None,
              weights: Sequence[float] | None = None, first_seed: int = 0,
              **kwargs) -> StepSplitPlan:
    """A plan for ``num_requests`` requests (seeds ``first_seed``, +1, ...) over ``num_stages``."""
    sampling = sampling or SamplingConfig()
    stages = split_steps(sampling.num_steps, num_stages, weights)
    requests = tuple(Request(i, first_seed + i) for i in range(num_requests))
    return StepSplitPlan(requests, tuple(stages), sampling, **kwargs)


def plan_from(plan) -> StepSplitPlan:
    """A ``runner.LayoutPlan`` with ``step > 1`` as this loop's plan: its stages run the
    forward axes; Wan 2.2's stages are cut at the expert boundary (one expert each)."""
    steps, m = plan.sampling.num_steps, plan.layout
    stages = tuple(split_steps(steps, m.step) if plan.sampling.boundary is None
                   else expert_stages(step_experts(plan), m.step))
    options = {f: getattr(plan, f) for f in ForwardOptions.__dataclass_fields__}
    return StepSplitPlan(plan.requests, stages, cfg=plan.cfg, stage=m.forward, **options,
                         sampling=plan.sampling, source=plan.source,
                         latent_shape=plan.latent_shape, solver=plan.solver,
                         prompts=plan.prompts, report_steps=plan.report_steps)
