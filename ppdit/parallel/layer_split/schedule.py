"""Layer-split PP, the pure part: which rank holds which blocks, and in which order it works.
Nothing here talks to another rank: the same code drives the real ranks (``ranks.py``) and a
simulated clock (``simulate``: the bubble formulas' check).

* **P** stages (ranks), each holding **V** chunks of contiguous blocks (*virtual stages*,
  Megatron's interleaving). Chunk c of rank r is virtual stage ``c * P + r``: a micro-batch
  visits rank 0, 1, ..., P-1, then rank 0 again for its chunk 1, and so on.
* **M** micro-batches per denoising step, cut from the *samples*: one per request, or two with
  CFG (the halves may land in different micro-batches: how one guided request fills 2 stages).
* A **task** ``(step, micro, chunk)`` runs one chunk on one micro-batch. The first virtual stage
  also patchifies (prologue), the last projects back (epilogue) and yields velocities; a
  request's Euler update happens on the last rank once all its halves are in.
* The updated latent goes back to rank 0 for the next step: the **wrap**. With ``wrap=True`` a
  micro-batch re-enters as soon as its requests are updated, so the pipeline never drains
  between steps (StreamDiffusionV2's block ring); with ``wrap=False`` every step flushes.

Task order on every rank: step, chunk, micro-batch (breadth first). For forward-only work this
reaches Megatron's interleaved bubble for any M >= P, not only multiples of P. Each rank can
compute every other rank's order, hence the exact order of the messages it will receive.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ppdit.checkpoint.source import ModelPlan, ModelSource
from ppdit.parallel.layout import Layout, check_layer_stages
from ppdit.parallel.partition import balanced_sizes, even_sizes, to_ranges
from ppdit.sampler import Conditioning, Request, SamplingConfig


@dataclass(frozen=True)
class Task:
    """One chunk of blocks applied to one micro-batch at one denoising step."""

    step: int
    micro: int
    chunk: int


@dataclass(frozen=True)
class Sample:
    """One row of a micro-batch: a request, conditional (half 0) or unconditional (half 1)."""

    request: int  # index into plan.requests
    half: int


@dataclass(frozen=True)
class LayerSplitPlan(ModelPlan):
    """Everything every rank must agree on (picklable)."""

    requests: tuple[Request, ...]
    num_stages: int  # P
    micro_batches: int  # M per denoising step
    virtual: int = 1  # V chunks per rank
    wrap: bool = True  # cross-step wrap (ring) instead of flushing every step
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(num_steps=4))
    # the weights (the model's dtype is the hidden states' between stages; latents stay fp32)
    source: ModelSource = field(default_factory=ModelSource)
    latent_shape: tuple[int, ...] | None = None
    # "euler", or "folder": the source folder's scheduler (its memory stays on the last stage,
    # the only one that updates latents)
    solver: str = "euler"
    prompts: tuple[Conditioning, ...] | None = None  # one per request; None: seeded stand-ins
    block_costs: tuple[float, ...] | None = None  # per-block cost for balancing; None = equal
    warmup: int = 1
    timeout_s: float = 120.0
    report_steps: bool = False  # the last rank emits ("step", i) events (a progress bar)
    # PipeFusion (``parallel.pipefusion``): the micro-batches are this many token patches of
    # every sample, each attending to the others' K/V of the step before; its first
    # ``warmup_steps`` run whole (one micro-batch: exact), filling every block's K/V
    patches: int = 1
    warmup_steps: int = 0
    # StreamDiffusionV2's first rank: it also decodes the first frame of each latent that comes
    # back to it (a preview), work beside its blocks that ``partition.rebalanced_sizes`` weighs
    decode_previews: bool = False

    @property
    def layout(self) -> Layout:
        """The layout this plan runs: ``layer=P`` (``pipefusion=P`` with patches)."""
        return Layout(**{"pipefusion" if self.patches > 1 else "layer": self.num_stages})

    def __post_init__(self) -> None:
        p, v, m = self.num_stages, self.virtual, self.micro_batches
        n = self.preset.num_layers
        if p < 1 or v < 1:
            raise ValueError(f"num_stages={p} and virtual={v} must be >= 1")
        self.check_workload()
        check_layer_stages(self.preset, p)
        if p * v > n:
            raise ValueError(f"virtual={v} x num_stages={p} = {p * v} chunks but "
                             f"{self.preset.name!r} has {n} blocks: every chunk needs at least one "
                             "block (V*P <= blocks)")
        if not self.requests:
            raise ValueError("a plan needs at least one request")
        if self.patches == 1 and not 1 <= m <= len(self.samples()):
            raise ValueError(f"micro_batches={m} must be between 1 and the number of samples "
                             f"({len(self.samples())}: requests x CFG halves)")
        if self.sampling.guidance_steps is not None and self.sampling.uses_cfg:
            raise ValueError("layer split guides every step or none: guidance_steps must be None")
        if self.block_costs is not None and (len(self.block_costs) != n
                                             or min(self.block_costs) <= 0):
            raise ValueError(f"block_costs must hold {n} positive costs")
        if self.patches > 1 and (m != self.patches or v != 1 or self.patches > self.tokens):
            raise ValueError(f"PipeFusion's micro-batches are its patches: micro_batches={m} "
                             f"must equal patches={self.patches}, with virtual=1 (got {v}) and "
                             f"at most one patch per token ({self.tokens} tokens)")

    # -- shapes -----------------------------------------------------------------------------

    @property
    def cfg(self) -> str:
        """Guided steps run their halves as separate samples (``micro_samples``): a plan with
        one sample per micro-batch computes ``WanPipeline``'s two forwards."""
        return "split"

    @property
    def world_size(self) -> int:
        """Ranks the plan needs: one per stage."""
        return self.num_stages

    @property
    def tokens(self) -> int:
        """Tokens of one sample's sequence."""
        return self.preset.num_tokens(self.shape)

    def micros(self, step: int) -> int:
        """Micro-batches of ``step``: PipeFusion's warm-up steps run whole (one)."""
        return 1 if self.patches > 1 and step < self.warmup_steps else self.micro_batches

    def patch(self, step: int, micro: int) -> slice:
        """The tokens micro-batch ``micro`` of ``step`` runs: all of them, or a patch."""
        if self.micros(step) == 1 or self.patches == 1:
            return slice(0, self.tokens)
        sizes = even_sizes(self.tokens, self.patches)
        return slice(sum(sizes[:micro]), sum(sizes[:micro + 1]))

    def samples(self) -> list[Sample]:
        """All rows of a step: each request, with its unconditional twin right after it (CFG)."""
        halves = 2 if self.sampling.uses_cfg else 1
        return [Sample(i, h) for i in range(len(self.requests)) for h in range(halves)]

    def micro_samples(self, micro: int) -> list[Sample]:
        """The samples of micro-batch ``micro`` (contiguous, sizes as even as possible; every
        sample with patches: a micro-batch is a patch of each)."""
        if self.patches > 1:
            return self.samples()
        sizes = even_sizes(len(self.samples()), self.micro_batches)
        return self.samples()[sum(sizes[:micro]):sum(sizes[:micro + 1])]

    def micro_requests(self, micro: int) -> list[int]:
        """Request indices with at least one sample in ``micro``."""
        return sorted({s.request for s in self.micro_samples(micro)})

    # -- blocks -----------------------------------------------------------------------------

    def chunks(self) -> list[list[range]]:
        """``chunks()[r][c]``: the block range of rank r's chunk c (virtual stage c * P + r)."""
        n, p, v, costs = self.preset.num_layers, self.num_stages, self.virtual, self.block_costs
        ranges = to_ranges(balanced_sizes(costs, p * v) if costs else even_sizes(n, p * v))
        return [[ranges[c * p + r] for c in range(v)] for r in range(p)]

    def is_first(self, rank: int, chunk: int) -> bool:
        """Virtual stage 0: patchifies the latent."""
        return rank == 0 and chunk == 0

    def is_last(self, rank: int, chunk: int) -> bool:
        """The last virtual stage: runs the epilogue and yields velocities."""
        return rank == self.num_stages - 1 and chunk == self.virtual - 1

    def next_hop(self, rank: int, chunk: int) -> tuple[int, int]:
        """Where a micro-batch goes after (rank, chunk): the next virtual stage."""
        vs = chunk * self.num_stages + rank + 1
        return vs % self.num_stages, vs // self.num_stages

    # -- order --------------------------------------------------------------------------------

    def tasks(self, rank: int) -> list[Task]:
        """Rank ``rank``'s tasks in execution order (the same formula on every rank):
        step-major, then chunk, then micro-batch — breadth first over the micro-batches."""
        return [Task(step, m, c) for step in range(self.sampling.num_steps)
                for c in range(self.virtual) for m in range(self.micros(step))]


class WrapTracker:
    """Decides when updated latents may go back to rank 0 (the wrap), on the last rank.

    ``done(task)`` records a last-virtual-stage task; it returns the requests whose every half
    now has its velocity (they can be updated) and the micro-batches of the *next* step whose
    latents are now all available, in order. Without ``wrap`` nothing is released before the
    whole step is done: the flush."""

    def __init__(self, plan: LayerSplitPlan):
        self.plan = plan
        self.halves_seen: dict[tuple[int, int], int] = {}
        self.updated: set[tuple[int, int]] = set()  # (step, request)
        self.released = 0  # micro-batches of step + 1 released so far, per current step
        self.done_micro: set[tuple[int, int]] = set()

    def done(self, task: Task) -> tuple[list[int], list[int]]:
        """(requests ready for their Euler update, micro-batches of step+1 to send now)."""
        plan, step = self.plan, task.step
        # a request is done when every micro-batch holding one of its halves is (PipeFusion:
        # each half in every patch)
        pieces = (2 if plan.sampling.uses_cfg else 1) * (plan.micros(step)
                                                          if plan.patches > 1 else 1)
        ready = []
        for s in plan.micro_samples(task.micro):
            key = (step, s.request)
            self.halves_seen[key] = self.halves_seen.get(key, 0) + 1
            if self.halves_seen[key] == pieces:
                ready.append(s.request)
                self.updated.add(key)
        self.done_micro.add((step, task.micro))
        if step + 1 >= plan.sampling.num_steps:
            return ready, []
        if not plan.wrap and len([d for d in self.done_micro if d[0] == step]) < plan.micros(step):
            return ready, []
        release, ahead = [], plan.micros(step + 1)
        while self.released < ahead:
            m = self.released
            if all((step, r) in self.updated for r in plan.micro_requests(m)):
                release.append(m)
                self.released += 1
            else:
                break
        if self.released == ahead:
            self.released = 0  # next step starts over
        return ready, release


@dataclass(frozen=True)
class Message:
    """One P2P message: hidden states for (step, micro, chunk at the receiver), or latents."""

    kind: str  # "hidden" or "latent"
    step: int
    micro: int
    chunk: int = 0


def _outputs(plan: LayerSplitPlan, rank: int, task: Task,
             tracker: WrapTracker) -> list[tuple[int, Message]]:
    """What (rank, task) sends when it ends, as (destination, message): hidden states to the
    next virtual stage, or from the last one the latents ``tracker`` releases (the wrap)."""
    if plan.is_last(rank, task.chunk):
        _, release = tracker.done(task)
        return [(0, Message("latent", task.step + 1, m)) for m in release]
    dst, chunk = plan.next_hop(rank, task.chunk)
    return [(dst, Message("hidden", task.step, task.micro, chunk))]


def messages_sent(plan: LayerSplitPlan, src: int) -> list[tuple[int, Message]]:
    """(destination rank, message) in the exact order rank ``src`` sends them.

    A receiver replays its predecessor's order from this to know what arrives next, so messages
    of different kinds on one pair of ranks never get confused (NCCL has no tags to tell them
    apart; matching by order works on every backend)."""
    tracker = WrapTracker(plan)
    return [out for t in plan.tasks(src) for out in _outputs(plan, src, t, tracker)]


def input_message(plan: LayerSplitPlan, rank: int, task: Task) -> Message | None:
    """What a task waits for: None for step 0's first virtual stage (fresh noise)."""
    if plan.is_first(rank, task.chunk):
        return None if task.step == 0 else Message("latent", task.step, task.micro)
    return Message("hidden", task.step, task.micro, task.chunk)


def sender_of(plan: LayerSplitPlan, rank: int, msg: Message) -> int:
    """Which rank sends ``msg`` to ``rank``."""
    if msg.kind == "latent":
        return plan.num_stages - 1
    vs = msg.chunk * plan.num_stages + rank - 1
    return vs % plan.num_stages


# -- A simulated clock: run the real task orders and message rules with given costs ----------------


@dataclass(frozen=True)
class SimSpan:
    """A task's place on the simulated clock."""

    rank: int
    task: Task
    start: float
    end: float


def simulate(plan: LayerSplitPlan, cost: Callable[[int, Task], float],
             latency: float = 0.0) -> list[SimSpan]:
    """Every rank's task list on a simulated clock, with the real ranks' orders and release
    rules: a task starts once its rank has finished the previous task in its order and its
    input has arrived (sent when the producing task ends, or when the wrap tracker releases
    it, plus ``latency`` between different ranks); ``cost(rank, task)`` is its duration."""
    arrival: dict[tuple[int, Message], float] = {}
    free = [0.0] * plan.num_stages
    orders = [plan.tasks(r) for r in range(plan.num_stages)]
    nxt = [0] * plan.num_stages
    tracker = WrapTracker(plan)  # only the last rank releases latents
    spans: list[SimSpan] = []
    progress = True
    while progress:
        progress = False
        for r in range(plan.num_stages):
            while nxt[r] < len(orders[r]):
                task = orders[r][nxt[r]]
                msg = input_message(plan, r, task)
                if msg is not None and (r, msg) not in arrival:
                    break
                start = max(free[r], arrival[(r, msg)] if msg is not None else 0.0)
                free[r] = start + cost(r, task)
                spans.append(SimSpan(r, task, start, free[r]))
                nxt[r] += 1
                progress = True
                for dst, out in _outputs(plan, r, task, tracker):
                    arrival[(dst, out)] = free[r] + (latency if dst != r else 0.0)
    if any(nxt[r] < len(orders[r]) for r in range(plan.num_stages)):
        raise RuntimeError("simulated schedule deadlocked: a task waits for a message "
                           "that is never sent")
    return spans


def sim_bubble(spans: Sequence[SimSpan], num_stages: int) -> float:
    """1 - busy / (P x makespan) of a simulated run: the bubble the schedule produced."""
    start, end = min(s.start for s in spans), max(s.end for s in spans)
    busy = sum(s.end - s.start for s in spans)
    return 1 - busy / (num_stages * (end - start))


def plan_from(plan) -> LayerSplitPlan:
    """A ``runner.LayoutPlan`` with ``layer > 1`` as this loop's plan: the guided halves as
    micro-batches of one sample (batch-1 forwards)."""
    return LayerSplitPlan(plan.requests, plan.layout.layer, 2 if plan.sampling.uses_cfg else 1,
                          sampling=plan.sampling, source=plan.source,
                          latent_shape=plan.latent_shape, solver=plan.solver,
                          prompts=plan.prompts, report_steps=plan.report_steps)
