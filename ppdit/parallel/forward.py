"""The forward axes, applied to one rank's model in one fixed order: what every loop runs.

Each forward axis (``Layout.forward``: tp, ring, ulysses, fsdp, cfg) transforms how a rank
computes one forward; every rank of a forward ends it with the same velocity. ``ForwardStack``
applies them in torchtitan's order, each on its mesh axis::

    weights   the whole model (built once per rank), or only this rank's shards read from a
              folder (TP: ``tensor.load``; FSDP: ``fsdp.load``): no rank holds the whole model
    1. TP     the blocks' heads and FFN columns split over ``tp`` (``tensor.parallelize``)
    2. ring, ulysses
              self-attention routed through Ulysses, ring attention or both (USP) over the
              sequence axes, re-installed every round with the round's tracer; the forward
              runs this rank's token slice and gathers the tokens (``sequence.ulysses``)
    3. FSDP   the blocks' weights sharded over every rank of the forward (``fsdp.shard``)
    4. CFG    this branch's half of each guided step, the velocities exchanged
              (``cfg.halves.CFGHalves``, the ``Denoiser``'s policy)

A pipeline axis picks the loop around it (``parallel.runner``); with every degree 1 the stack is
the model itself. ``ForwardOptions``, the transforms' knobs (V-first, two-phase all-to-all,
V-Major, TP's collectives, compiled blocks), is a mixin of every plan, checked against its layout.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import torch

from ppdit.attention import use_diffusers_attention
from ppdit.cache import BlockCache, CacheConfig
from ppdit.checkpoint.solver import plan_denoiser
from ppdit.model import held, like
from ppdit.parallel.cfg.halves import CFGHalves
from ppdit.parallel.fsdp.load import load_sharded
from ppdit.parallel.fsdp.shard import shard_blocks, trace_gathers
from ppdit.parallel.layout import SEQUENCE, check_model
from ppdit.parallel.sequence.comms import A2ACounter, even_split
from ppdit.parallel.sequence.ring import Ring, install_ring
from ppdit.parallel.sequence.topology import hierarchy
from ppdit.parallel.sequence.ulysses import install_ulysses, sp_forward
from ppdit.parallel.sequence.usp import install_usp
from ppdit.parallel.sequence.vmajor import VMajor
from ppdit.parallel.share import check_plans
from ppdit.parallel.tensor.layers import COLLECTIVES, all_reduce_sum
from ppdit.parallel.tensor.load import load_tp
from ppdit.parallel.tensor.parallelize import compile_blocks, parallelize_wan
from ppdit.runtime.comm.mesh import RankMesh
from ppdit.runtime.comm.wire import PLAIN
from ppdit.runtime.observe.trace import Tracer
from ppdit.runtime.processes.rank import RankContext
from ppdit.runtime.rounds import Runner
from ppdit.sampler import Denoiser


@dataclass(frozen=True, kw_only=True)
class ForwardOptions:
    """How the forward axes run (a mixin of the plans: keyword fields with defaults)."""

    v_first: bool = True  # Ulysses: V's all-to-all issued before the Q/K work (CoCoDiff)
    # Ulysses: all-to-alls in two phases over nodes of this many ranks (``sequence.topology``)
    ranks_per_node: int | None = None
    # Ulysses: V's all-to-all sends only rows whose relative change exceeds this (``vmajor``)
    v_major: float | None = None
    collectives: str = "funcol"  # how TP all-reduces are issued (``tensor.layers``)
    compiled: bool = False  # torch.compile(fullgraph=True) every block
    cache: CacheConfig | None = None  # step caching (``ppdit.cache``): one decision, all ranks

    def check_forward(self) -> None:
        """The plan's layout fits its model and request (``check_model``), and the options fit
        the layout (``ValueError`` naming the rule and the values)."""
        layout, sampling = self.layout, self.sampling
        check_model(layout, self.preset, num_steps=sampling.num_steps, latent_shape=self.shape,
                    guided=sampling.uses_cfg and sampling.guidance_steps is None)
        ulysses_only = layout.ulysses > 1 and layout.ring == 1
        if self.v_major is not None and (not ulysses_only or layout.pipeline is not None
                                         or self.v_major < 0):
            # its copies are per request: only the request-by-request loop resets them
            raise ValueError(f"v_major={self.v_major} needs a Ulysses-only layout without a "
                             f"pipeline axis (got {layout}) and a threshold >= 0")
        n = self.ranks_per_node
        if n is not None and (not ulysses_only or n < 1 or layout.ulysses % n):
            raise ValueError(f"ranks_per_node={n} needs a Ulysses-only layout (got {layout}) "
                             f"and must divide ulysses={layout.ulysses}")
        if self.collectives not in COLLECTIVES:
            raise ValueError(f"collectives={self.collectives!r} is not one of {COLLECTIVES}")
        if self.cache is not None and self.cache.kind == "mag" and \
                len(self.cache.mag_ratios) != sampling.num_steps:
            raise ValueError(f"MagCache's mag_ratios hold {len(self.cache.mag_ratios)} values: "
                             f"give one per step (num_steps={sampling.num_steps})")
        if self.cache is not None and (layout.splits_blocks or layout.fsdp
                                       or self.v_major is not None):
            # layer split runs no whole forward to skip; FSDP's gathers and V-Major's copies
            # run per block, and ranks skipping different blocks would wait on each other
            raise ValueError(f"step caching runs on one device, step split, TP, CFG and the "
                             f"sequence axes, not with layout {layout}"
                             f"{' and v_major' if self.v_major is not None else ''}")


class ForwardStack:
    """One rank's model for one plan, with the plan's forward axes applied (module docstring).

    ``base`` is the rank's one whole model, shared by every plan of a side-by-side job (None
    when every plan reads shards instead). TP shards a fresh copy; FSDP shards ``base`` in
    place; the sequence axes re-route its attention every round."""

    def __init__(self, ctx: RankContext, plan, mesh: RankMesh | None, base=None):
        self.ctx, self.plan, self.mesh = ctx, plan, mesh
        self.layout = plan.layout.forward
        self.wire = ctx.wire if ctx is not None else PLAIN  # its collectives too
        self.load_peak_bytes = 0  # tensor bytes live at once while reading shards (FSDP)
        self.shared = False  # the model is ``base``: other plans route its attention too
        self.model = self._weights(base)
        if plan.compiled:
            for model in self.models():
                compile_blocks(model)
        self.split = even_split(plan.preset.num_tokens(plan.shape), self.layout.sp)
        self.hier = None if mesh is None else hierarchy(mesh)
        self.vmajor = None if plan.v_major is None else VMajor(plan.v_major)
        self.counters, self.rings = [A2ACounter()], [Ring(None, self.split, 0)]

    def models(self) -> list:
        """The rank's transformers: Wan 2.2's experts it holds (each gets every axis), or one."""
        return list(held(self.model).values())

    def _weights(self, base):
        """Steps 1 and 3: the model TP-split or FSDP-sharded (read shard by shard from a
        folder where there is no ``base``), or ``base`` itself (``shared``)."""
        f, device = self.layout, self.ctx.device if self.ctx is not None else "cpu"
        if f.tp > 1:
            kw = dict(collectives=self.plan.collectives, wire=self.wire)
            group = self.mesh.group("tp")
            if base is None:
                return load_tp(self.plan.source, group, device, **kw)[0]
            whole = self.plan.source.dit(device, experts=list(held(base)))
            return like(whole, {k: parallelize_wan(m, tp_group=group, **kw)  # each expert held
                                for k, m in held(whole).items()})
        if f.fsdp:
            if self.wire.staged:
                raise ValueError("FSDP gathers weights with the rank's own backend: ranks "
                                 "sharing a GPU over gloo (staged) cannot; give each rank its "
                                 "own GPU or run on the CPU")
            group = self.mesh.group("cfg", *SEQUENCE)
            if base is None:  # a folder: read this rank's shards, never the whole model
                model, self.load_peak_bytes = load_sharded(self.plan.source, group, device)
                return model
            for model in held(base).values():
                shard_blocks(model, group, device.type)  # in place: one mesh per job
        elif base is None:
            raise ValueError(f"layout {self.plan.layout}: only TP and FSDP read shards")
        self.shared = True
        return base

    def denoiser(self) -> Denoiser:
        """The plan's ``Denoiser`` over this stack's forward (step 2) and CFG policy (step 4)."""
        forward, cache = None, None
        if self.layout.sp > 1:
            group = self.mesh.group(*SEQUENCE)
            if self.plan.cache is not None:  # one decision: the sums over every token slice
                cache = BlockCache(self.plan.cache, partial(
                    all_reduce_sum, group=group, collectives="funcol", wire=self.wire))
            forward = {k: partial(sp_forward, m, group=group, split=self.split,  # per expert
                                  wire=self.wire, cache=cache)
                       for k, m in held(self.model).items()}
            if self.vmajor is not None:  # one transformer (``check_forward``)
                forward = {0: _KeyedByText(forward[0], self.vmajor)}
        cfg = None
        if self.layout.cfg > 1:
            cfg = CFGHalves(self.mesh.coords["cfg"], self.mesh.group("cfg"), self.wire)
        return plan_denoiser(self.model, self.plan, forward=forward, cfg=cfg, cache=cache)

    def install(self, tracer: Tracer | None) -> None:
        """Step 2 for one round: route self-attention for this plan, counters zeroed."""
        f = self.layout
        self.counters, self.rings = [A2ACounter()], [Ring(None, self.split, 0)]
        if f.sp == 1:
            return
        if self.hier is not None:
            self.hier.reset()
        if self.vmajor is not None:
            self.vmajor.zero_counts()
        for model in self.models():  # Wan 2.2: each expert's traffic, summed in ``counts``
            if f.ring > 1 and f.ulysses > 1:
                counter, ring = install_usp(model, self.mesh, self.split, self.ctx.wire,
                                            tracer=tracer)
            elif f.ring > 1:
                counter, ring = A2ACounter(), install_ring(model, self.mesh.group("ring"),
                                                           self.split, self.ctx.wire,
                                                           tracer=tracer)
            else:
                counter = install_ulysses(model, self.mesh.group("ulysses"), self.split,
                                          v_first=self.plan.v_first, hier=self.hier,
                                          vmajor=self.vmajor, wire=self.wire,
                                          tracer=tracer)
                ring = Ring(None, self.split, 0)
            self.counters.append(counter)
            self.rings.append(ring)

    def start_request(self, den: Denoiser, request) -> None:
        """V-Major starts a request holding nothing, told which text is the prompt's."""
        if self.vmajor is not None:
            self.vmajor.reset()
            den.forwards[0].cond_text = den.conditioning(request).text

    @property
    def draws_compute(self) -> bool:
        """The forward draws its own compute spans (sequence attention, FSDP's blocks): a loop
        then draws none per step, or a trace would count the busy time twice."""
        return self.layout.sp > 1 or self.layout.fsdp

    @contextmanager
    def round(self, tracer: Tracer | None):
        """One round: attention routed with ``tracer``, FSDP's all-gathers drawn on it; after
        it, a model other plans share has diffusers' attention back (only routing plans
        change it, so only they undo it)."""
        self.install(tracer)
        fsdp = self.layout.fsdp and tracer is not None
        gathers = [h for m in self.models() for h in trace_gathers(m, tracer)] if fsdp else []
        try:
            yield self
        finally:
            for handle in gathers:
                handle.remove()
            if self.shared and self.layout.sp > 1:
                for model in self.models():
                    use_diffusers_attention(model)

    def counts(self) -> dict:
        """What this round's traffic counters say."""
        hier, vm = self.hier, self.vmajor
        return {"a2a_calls": sum(c.calls for c in self.counters),
                "a2a_bytes": sum(c.bytes_sent for c in self.counters),
                "ring_bytes": sum(r.bytes_sent for r in self.rings),
                "hier": None if hier is None else (hier.intra_bytes, hier.inter_bytes,
                                                   hier.inter_messages),
                "vmajor": None if vm is None else (vm.rows_sent, vm.rows_total, vm.bytes_sent,
                                                   vm.bytes_full),
                "load_peak_bytes": self.load_peak_bytes}


class StackRunner(Runner):
    """One rank's runner for plans that run forward axes (``runner.LayoutRunner``, step-split
    stages): per plan its groups (``meshes``), its ``ForwardStack``, its ``Denoiser``. The
    whole model is built from the plans' one ``source`` before the process group exists, then
    moved to the rank's device (``self.model``), unless ``loads_shards``: then every plan reads
    only this rank's share of a folder's weights once the groups exist (``self.model`` None)."""

    check = staticmethod(check_plans)

    @staticmethod
    def loads_shards(plans: tuple) -> bool:
        """Every plan reads its shards of a folder (TP, FSDP): no rank builds the whole model
        (Wan 2.2's experts are built whole, then split: the shard readers know one transformer)."""
        return all(p.source.folder is not None and p.source.boundary_ratio is None
                   and (p.layout.forward.tp > 1 or p.layout.forward.fsdp) for p in plans)

    @staticmethod
    def experts_of(rank: int, plans: tuple) -> list[int] | None:
        """Of a two-expert source, the experts this rank runs (None: all; a stage says)."""
        return None

    @classmethod
    def prepare(cls, rank: int, world_size: int, plans: tuple):
        """The whole model (every plan shares one source: ``check_plans``), or None."""
        if not cls.loads_shards(plans):
            return plans[0].source.dit(experts=cls.experts_of(rank, plans))
        return None

    def __init__(self, ctx: RankContext, plans: tuple):
        if any(p.layout.fsdp for p in plans) and len({p.layout for p in plans}) > 1:
            raise ValueError("FSDP shards the rank's one model in place: every plan of a job "
                             f"must ask for it on the same layout, got "
                             f"{[str(p.layout) for p in plans]}")
        super().__init__(ctx, plans)
        model = ctx.prepared or self.prepare(ctx.rank, ctx.world_size, plans)
        self.model = None if model is None else model.to(ctx.device)
        # every rank creates every plan's groups, in plan order (group creation is collective)
        self.meshes = [p.mesh().build(ctx.rank) for p in plans]
        self.stacks = [None if m is None else ForwardStack(ctx, p, m, self.model)
                       for p, m in zip(plans, self.meshes, strict=True)]
        self.dens: list[Denoiser | None] = [None if s is None else s.denoiser()
                                            for s in self.stacks]

    def takes_part(self, i: int) -> bool:
        return self.stacks[i] is not None

    def model_of(self, i: int):
        return self.stacks[i].model


class _KeyedByText:
    """A forward that tells V-Major which conditioning it runs: each has its own V and copies."""

    def __init__(self, forward, vm: VMajor):
        self.forward, self.vm = forward, vm
        self.cond_text: torch.Tensor | None = None

    def __call__(self, latent: torch.Tensor, timestep: torch.Tensor, text: torch.Tensor
                 ) -> torch.Tensor:
        same = self.cond_text is not None and torch.equal(text, self.cond_text)
        self.vm.branch = 0 if same else 1
        return self.forward(latent, timestep, text)
