"""Layer-split pipeline parallelism: each rank holds only its blocks; hidden states travel.

::

    rank 0: [prologue + blocks 0-1] --h--> rank 1: [blocks 2-3 + epilogue] --latent--+
       ^                                                                            |
       +------------------------ next step (the wrap) ------------------------------+

Only a micro-batch's tokens ``h`` (n, S, D) cross a stage boundary. The conditioning every block
needs (rope, timestep modulation, projected text) is *recomputed* on each rank from the step
index and seeds: one small MLP and a text projection, against sending (n, 6, D) + (n, L, D) with
every hop (for Wan 14B, 1.6% more bytes than ``h`` at 480p, half as much again for a 1,000-token
preview). The price: every rank keeps the condition embedder's weights.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace

import torch

from ppdit.checkpoint.partial import fill_from_folder, meta_transformer
from ppdit.checkpoint.solver import plan_denoiser
from ppdit.model import condition, embed_patches, epilogue, project_out, run_blocks, unpatchify
from ppdit.parallel.layer_split.comms import Mailbox, encode, message_spec
from ppdit.parallel.layer_split.schedule import (
    LayerSplitPlan,
    Message,
    Task,
    WrapTracker,
    input_message,
)
from ppdit.parallel.layer_split.torch_baseline import run_torch_gpipe
from ppdit.parallel.pipefusion.displaced import install_displaced
from ppdit.parallel.share import check_plans
from ppdit.presets import get_preset
from ppdit.runtime.comm.mesh import Lanes, build_lanes
from ppdit.runtime.comm.wire import FrameSender, FrameSpec
from ppdit.runtime.observe.timing import exchange
from ppdit.runtime.observe.trace import Tracer
from ppdit.runtime.processes.rank import RankContext
from ppdit.runtime.rounds import Runner
from ppdit.sampler import Conditioning, Denoiser, StepState, batched, frame_timesteps, guide
from ppdit.vae.decode import decode

# -- What each rank holds --------------------------------------------------------------------------


def build_stage_model(plan: LayerSplitPlan, rank: int):
    """The model with only rank ``rank``'s blocks (plus the prologue on rank 0, the epilogue on
    the last rank, and the small condition embedder everywhere).

    From a folder, only those tensors are read (``checkpoint.partial``): the rank never holds
    another rank's blocks, not even while loading. A seeded preset is built whole from its seed
    first, so that its weights are identical to the single-device reference, and the other
    blocks are dropped (peak host memory: one full model, briefly)."""
    folder = plan.source.folder
    model = meta_transformer(folder, plan.source.dtype) if folder else plan.source.dit()
    owned = {i for chunk in plan.chunks()[rank] for i in chunk}
    for i in range(len(model.blocks)):  # drop every block and end that the rank does not run
        if i not in owned:
            model.blocks[i] = torch.nn.Identity()  # keeps indices; holds no weights
    if rank != 0:
        model.patch_embedding = None
    if rank != plan.num_stages - 1:
        model.proj_out = None
        model.scale_shift_table = None
    if folder:
        fill_from_folder(model, folder, torch.device("cpu"))
        model.eval().requires_grad_(False)
    return model


def expected_param_count(plan: LayerSplitPlan, rank: int) -> int:
    """What ``build_stage_model(plan, rank)`` must hold, counted from the full model's names."""
    full = plan.source.dit("meta")
    owned = {i for chunk in plan.chunks()[rank] for i in chunk}
    total = 0
    for name, p in full.named_parameters():
        head = name.split(".")[0]
        if head == "blocks" and int(name.split(".")[1]) not in owned:
            continue
        if head == "patch_embedding" and rank != 0:
            continue
        if head in ("proj_out", "scale_shift_table") and rank != plan.num_stages - 1:
            continue
        total += p.numel()
    return total


# -- One rank's run --------------------------------------------------------------------------------


class _Rank:
    """Executes ``plan.tasks(rank)`` with real compute and real messages."""

    def __init__(self, ctx: RankContext, plan: LayerSplitPlan, model, tracer: Tracer,
                 lanes: Lanes | None = None, vae=None):
        self.ctx, self.plan, self.model, self.tracer, self.vae = ctx, plan, model, tracer, vae
        self.lanes = lanes  # one communicator per direction: see comms.Mailbox
        self.rank = ctx.rank
        self.dim = model.config.num_attention_heads * model.config.attention_head_dim
        self.dtype = model.dtype  # activations; latents and the update stay fp32
        self.mailbox = Mailbox(plan, self.rank, self.dim, ctx.wire, plan.timeout_s, lanes=lanes)
        self.senders: dict[tuple[int, FrameSpec], FrameSender] = {}
        # The shared sampling loop's pieces: conditioning, guidance and the solver update.
        self.den = plan_denoiser(model, plan)
        self.conds: dict[tuple[int, int], object] = {}
        # Every request's current state: its latent (rank 0 reads it at step 0), and on the
        # last rank, which applies the updates, the solver's memory too.
        self.states = [self.den.initial_state(r, plan.shape) for r in plan.requests]
        self.velocity: dict[tuple[int, int], torch.Tensor] = {}
        self.tracker = WrapTracker(plan)
        self.local: dict[Message, torch.Tensor] = {}
        self.cursor = None  # PipeFusion: this stage's blocks attend over displaced patches
        if plan.patches > 1:
            self.cursor = install_displaced(model, plan.chunks()[self.rank][0])
            self.cursor.tokens = plan.tokens
        self.pieces: list[torch.Tensor] = []  # PipeFusion's last stage: a step's patches out

    def run(self) -> dict[int, torch.Tensor]:
        """All tasks of this rank, in order; the last rank returns the final latents."""
        for task in self.plan.tasks(self.rank):
            self.execute(task)
        for sender in self.senders.values():
            sender.flush()
        if self.rank != self.plan.num_stages - 1:
            return {}
        return {s.request_id: s.latent for s in self.states}

    def execute(self, task: Task) -> None:
        """Receive the input, run the chunk (plus prologue / epilogue), send the output."""
        plan = self.plan
        first, last = plan.is_first(self.rank, task.chunk), plan.is_last(self.rank, task.chunk)
        x = self.receive(task)
        if self.vae is not None and first and task.step > 0:  # the step's preview
            with self.tracer.span("decode", f"m{task.micro}", step=task.step, micro=task.micro):
                decode(self.vae, x[:1, :, :1])  # its first frame
        blocks = plan.chunks()[self.rank][task.chunk]
        with self.tracer.span("compute", f"m{task.micro}", step=task.step, micro=task.micro,
                              chunk=task.chunk), torch.no_grad():
            ctx = self.conditioning(task)
            if first:  # an image's latent replaces the first frame (TI2V)
                x = micro_input(self.den, plan, plan.micro_samples(task.micro), x,
                                x.new_zeros(x.shape[0]))[0]
            h = embed_patches(self.model, x.to(self.dtype)) if first else x
            if self.cursor is None:
                out = run_blocks(self.model, h, ctx, blocks)
                out = epilogue(self.model, out, ctx) if last else out
            else:
                out = self.run_patch(task, h[:, plan.patch(task.step, task.micro)]
                                     if first else h, ctx, blocks, last)
        if last:
            self.finish(task, out)
        else:
            dst, chunk = plan.next_hop(self.rank, task.chunk)
            self.send(dst, Message("hidden", task.step, task.micro, chunk), out)

    def run_patch(self, task: Task, h: torch.Tensor, ctx, blocks: range, last: bool):
        """PipeFusion: the patch's tokens through this stage's blocks (their rope rows; the
        processors told which rows); the last stage keeps each patch's projected tokens and
        returns the velocity once the step's last patch is in (else None)."""
        patch = self.plan.patch(task.step, task.micro)
        self.cursor.patch = patch
        cos, sin = ctx.rotary_emb
        mine = replace(ctx, rotary_emb=(cos[:, patch], sin[:, patch]))
        h = run_blocks(self.model, h.contiguous(), mine, blocks)
        if not last:
            return h
        self.pieces.append(project_out(self.model, h, mine))
        if len(self.pieces) < self.plan.micros(task.step):
            return None
        tokens, self.pieces = torch.cat(self.pieces, dim=1), []
        return unpatchify(self.model, tokens, ctx.grid)

    def receive(self, task: Task) -> torch.Tensor:
        """The task's input: noise at step 0 on the first stage, else a message."""
        msg = input_message(self.plan, self.rank, task)
        if msg is None:
            return torch.stack([self.states[s.request].latent[0]
                                for s in self.plan.micro_samples(task.micro)])
        if msg in self.local:
            return self.local.pop(msg)
        with self.tracer.span("recv", f"m{task.micro}", step=task.step, micro=task.micro,
                              message=msg.kind):
            return self.mailbox.get(msg)

    def send(self, dst: int, msg: Message, tensor: torch.Tensor) -> None:
        """Hand a tensor to another rank (or keep it, if that rank is this one)."""
        if dst == self.rank:
            self.local[msg] = tensor
            return
        spec = message_spec(self.plan, msg, self.dim)
        tx = self.senders.setdefault((dst, spec), FrameSender(
            spec, dst, self.ctx.wire, max_in_flight=1 << 30, announce=False,
            group=self.lanes.between(self.rank, dst) if self.lanes is not None else None,
            timeout_s=self.plan.timeout_s))
        with self.tracer.span("send", f"m{msg.micro}", step=msg.step, micro=msg.micro,
                              message=msg.kind):
            tx.send(tensor.contiguous(), encode(msg))

    def conditioning(self, task: Task):
        """Rope, timestep modulation and projected text for a micro-batch at a step: computed
        here (cheap) rather than received; cached while this rank's chunks (PipeFusion: the
        step's patches) still need it."""
        patched = self.plan.patches > 1  # every patch of a step: the same samples
        key = (task.step, -1 if patched else task.micro)
        if key not in self.conds:
            samples = self.plan.micro_samples(task.micro)
            text = micro_text(self.den, self.plan, samples).to(self.dtype)
            t = micro_input(self.den, self.plan, samples, None,
                            self.den.timesteps[task.step].expand(len(samples)))[1]
            self.conds[key] = condition(self.model, (len(samples), *self.plan.shape[1:]), t, text)
        ctx = self.conds[key]
        if task.chunk == self.plan.virtual - 1 and (
                not patched or task.micro == self.plan.micros(task.step) - 1):
            del self.conds[key]
        return ctx

    def finish(self, task: Task, velocity: torch.Tensor | None) -> None:
        """Last stage: keep the velocities (None: a patch short of its step's last), update
        finished requests, wrap latents to rank 0."""
        plan = self.plan
        for s, v in zip(plan.micro_samples(task.micro),
                        () if velocity is None else velocity.split(1), strict=False):
            self.velocity[(s.request, s.half)] = v
        ready, release = self.tracker.done(task)
        for r in ready:
            self.states[r] = update_request(self.den, self.plan, self.states[r], self.velocity)
            if plan.report_steps and r == 0:
                self.ctx.emit(("step", task.step))
        for m in release:
            latents = torch.cat([self.states[s.request].latent for s in plan.micro_samples(m)])
            self.send(0, Message("latent", task.step + 1, m), latents)


def micro_input(den: Denoiser, plan: LayerSplitPlan, samples, latent, timestep):
    """A micro-batch's latent and timesteps as the DiT reads them (an image's first frame in
    place, at t = 0: ``Conditioning.model_input``); ``latent`` None: the timesteps only."""
    conds = [den.conditioning(plan.requests[s.request]) for s in samples]
    if latent is None:  # only the timesteps: per frame with a first-frame image
        return None, (timestep if conds[0].image is None else
                      frame_timesteps(timestep, plan.shape[2]))
    both = Conditioning(None, None, batched(conds, "image"), batched(conds, "channels"))
    return both.model_input(latent, timestep)


def micro_text(den: Denoiser, plan: LayerSplitPlan, samples) -> torch.Tensor:
    """The text rows of a micro-batch: a request's prompt (conditional half) or null prompt."""
    conds = [den.conditioning(plan.requests[s.request]) for s in samples]
    return torch.cat([c.text if s.half == 0 else c.null_text
                      for s, c in zip(samples, conds, strict=True)])


def update_request(den: Denoiser, plan: LayerSplitPlan, state: StepState, velocity: dict
                   ) -> StepState:
    """A request's state after its step, from the velocities of its halves (popped from
    ``velocity``): guidance, then the shared solver update (with the solver's memory)."""
    index = next(i for i, r in enumerate(plan.requests) if r.request_id == state.request_id)
    v = velocity.pop((index, 0))
    if plan.sampling.uses_cfg:
        v = guide(v, velocity.pop((index, 1)), den.sampling.guidance_scale)
    return den.update([state], v)[0]


class LayerStageRunner(Runner):
    """Every plan of a side-by-side job on one rank; a job's plans are (plan, engine) pairs,
    engine "ppdit" (this file's executor) or "torch" (``torch.distributed.pipelining``)."""

    check = staticmethod(check_plans)

    @staticmethod
    def prepare(rank: int, world_size: int, plans: Sequence[tuple[LayerSplitPlan, str]]):
        """Before the process group exists: this rank's part of the model, for every plan."""
        return [build_stage_model(p, rank) if rank < p.num_stages else None for p, _ in plans]

    def __init__(self, ctx: RankContext, plans: Sequence[tuple[LayerSplitPlan, str]]):
        super().__init__(ctx, plans)
        models = ctx.prepared or self.prepare(ctx.rank, ctx.world_size, plans)
        self.models = [None if m is None else m.to(ctx.device) for m in models]
        self.vaes = [p.source.vae(ctx.device) if p.decode_previews and ctx.rank == 0 else None
                     for p, _ in plans]
        self.lanes = build_lanes()  # every rank, every plan: group creation is collective

    def takes_part(self, i: int) -> bool:
        return self.models[i] is not None

    def warm_up(self, i: int) -> None:
        plan = self.plans[i][0]
        _warm_up(self.ctx, plan, self.models[i])
        if self.vaes[i] is not None:  # its first launches sync the device: before any receive
            decode(self.vaes[i], torch.zeros(1, *plan.shape[1:2], 1, *plan.shape[3:]))
        if plan.warmup and self.plans[i][1] == "ppdit":
            self._warm_pairs(plan.num_stages)

    def _warm_pairs(self, stages: int) -> None:
        """One fused exchange on both lanes of every pair of stages, pairs in one global
        order: NCCL's lazy per-pair set-up belongs to the warm-up, not the first timed round."""
        me = self.ctx.rank
        for a, b in itertools.combinations(range(stages), 2):
            if me in (a, b):
                for lane in (self.lanes.up, self.lanes.down):
                    exchange(b if me == a else a, self.ctx.wire, lane)

    def run(self, i: int, tracer: Tracer) -> dict[int, torch.Tensor]:
        """One round; the last rank returns the final latents."""
        plan, engine = self.plans[i]
        if engine == "torch":
            return run_torch_gpipe(self.ctx, plan, self.models[i], tracer)
        return _Rank(self.ctx, plan, self.models[i], tracer, self.lanes, self.vaes[i]).run()

    def model_of(self, i: int):
        return self.models[i]

    def result(self, i: int) -> int:
        """Parameters this rank holds for plan ``i``."""
        return sum(p.numel() for p in self.models[i].parameters())


def _warm_up(ctx: RankContext, plan: LayerSplitPlan, model) -> None:
    """One untimed pass over this rank's chunks (allocator, kernel choice) on zeros."""
    n = len(plan.micro_samples(0))
    shape = (n, *plan.shape[1:])
    preset = get_preset(plan.preset)
    text = torch.zeros(n, preset.text_len, preset.text_dim, device=ctx.device, dtype=model.dtype)
    with torch.no_grad():
        for _ in range(plan.warmup):
            cond = condition(model, shape, torch.zeros(n, device=ctx.device), text)
            dim = model.config.num_attention_heads * model.config.attention_head_dim
            h = torch.zeros(n, cond.rotary_emb[0].shape[1], dim, device=ctx.device,
                            dtype=model.dtype)
            for blocks in plan.chunks()[ctx.rank]:
                run_blocks(model, h, cond, blocks)
