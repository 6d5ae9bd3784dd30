"""One value for how a generation is spread over ranks, ``Layout(cfg=2, ulysses=2, ring=2)``,
and the one rule for which axes compose. Each field is the degree of one axis (1: not split)::

    cfg      the conditional and unconditional halves of a guided step on 2 branches
    step     step split: pipeline stages that each run a run of the steps
    layer    layer split: pipeline stages that each hold a run of the blocks
    pipefusion  layer split's stages fed token patches that attend to the other patches' K/V
             of the previous step (xDiT's PipeFusion: lossy after its exact warm-up steps)
    ring     ring attention (K/V blocks around a ring: any head count)
    ulysses  Ulysses sequence parallelism (all-to-alls to a head split: any degree, whole heads)
    tp       tensor parallelism (the weights split, all-reduces in every block)
and one flag::

    fsdp     the blocks' weights sharded (FSDP2) over the ranks of one forward (cfg x ring x
             ulysses: the group is derived, as torchtitan derives its ``dp_shard_cp``)

The ranks are the product of the degrees. Two kinds of axis, which
the one runner (``parallel.runner``) follows: the *forward* axes (tp, ring, ulysses, fsdp, cfg)
transform one forward, every rank of which ends a step with the same latent, so they compose
with each other and with a pipeline, in one fixed order (TP, sequence axes, FSDP, CFG); the
*pipeline* axes (step, layer) pick the loop. ``mesh()`` orders the axes outermost to innermost
as dp, step | layer, cfg, ring, ulysses, tp: the innermost talk most (TP: NVLink neighbours).

The composition rule (``Layout.__post_init__``) is stated once and read by ``ppdit plan``,
``ppdit generate`` and every notebook; ``check_model`` adds the rules that depend on the model
and request. Nothing here imports torch, so ``ppdit plan`` answers in a fraction of a second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

AXES = ("cfg", "step", "layer", "pipefusion", "ring", "ulysses", "tp")  # ``fsdp``: a flag
PIPELINE_AXES = ("step", "layer", "pipefusion")
BLOCK_AXES = ("layer", "pipefusion")  # pipelines whose stages hold blocks: they stand alone
SEQUENCE = ("ring", "ulysses")  # one forward's tokens split over these ranks
FORWARD = ("cfg", "ring", "ulysses", "tp")  # every rank of one forward (FSDP shards over them)
# the names ``parse_layout`` expands, given the ranks (pp_tp: stages of 2 TP ranks)
SHORTHANDS = ("single", "step", "layer", "tp", "sp", "ring", "usp", "pp_tp", "cfg")


@dataclass(frozen=True)
class Layout:
    """The degree of every axis (the ranks are their product), and whether FSDP shards."""

    cfg: int = 1
    step: int = 1
    layer: int = 1
    pipefusion: int = 1
    ring: int = 1
    ulysses: int = 1
    tp: int = 1
    fsdp: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "fsdp" and not isinstance(value, bool):
                raise ValueError(f"layout fsdp={value!r} is a flag (True or False): it shards "
                                 "over the cfg x ring x ulysses ranks of one forward")
            if f.name != "fsdp" and (not isinstance(value, int) or isinstance(value, bool)
                                     or value < 1):
                raise ValueError(f"layout {f.name}={value!r} must be an integer >= 1")
        _check_composition(self)

    @property
    def ranks(self) -> int:
        """World size: the product of the degrees."""
        return math.prod(getattr(self, name) for name in AXES)

    @property
    def shards(self) -> int:
        """Ranks that hold a shard of each block's weights: cfg x ring x ulysses with
        ``fsdp``, else 1 (every rank holds its whole share)."""
        return self.cfg * self.sp if self.fsdp else 1

    @property
    def pipeline(self) -> str | None:
        """The pipeline axis, "step", "layer" or "pipefusion", or None."""
        return next((a for a in PIPELINE_AXES if getattr(self, a) > 1), None)

    @property
    def stages(self) -> int:
        """Pipeline stages (1 without a pipeline)."""
        return self.step * self.layer * self.pipefusion

    @property
    def splits_blocks(self) -> bool:
        """A pipeline whose stages hold runs of the blocks (layer split, PipeFusion)."""
        return self.pipeline in BLOCK_AXES

    @property
    def sp(self) -> int:
        """Ranks that share one forward's tokens (ring x ulysses)."""
        return self.ring * self.ulysses

    @property
    def forward(self) -> Layout:
        """The forward axes alone: what each stage's ranks run (no pipeline)."""
        return replace(self, step=1, layer=1, pipefusion=1)

    def split(self) -> dict[str, int]:
        """The axes with a degree above 1 (``fsdp``: the ranks it shards over)."""
        return {name: getattr(self, name) for name in AXES if getattr(self, name) > 1} | (
            {"fsdp": self.shards} if self.fsdp else {})

    def __str__(self) -> str:
        degrees = [f"{a}={getattr(self, a)}" for a in AXES if getattr(self, a) > 1]
        return ",".join(degrees + (["fsdp"] if self.fsdp else [])) or "single"

    @property
    def name(self) -> str:
        """A label for tables: "1 GPU", "TP=2", "CFG=2 x Ulysses=4 x FSDP", "step-split P=4"."""
        label = {"cfg": "CFG", "ring": "ring", "ulysses": "Ulysses", "tp": "TP"}
        parts = [f"{label[a]}={getattr(self, a)}" for a in ("cfg", "ulysses", "ring", "tp")
                 if getattr(self, a) > 1]
        if self.pipeline:
            parts.append("PipeFusion" if self.pipefusion > 1 else f"{self.pipeline}-split"
                         f" P={self.stages}")
        return " x ".join(parts + (["FSDP"] if self.fsdp else [])) or "1 GPU"

    def mesh(self, dp: int = 1, first_rank: int = 0, ranks_per_node: int | None = None):
        """The rank grid of this layout (``dp`` replicas of it), with every group its axes
        need: ``runtime.comm.mesh.Mesh`` (its ``build(rank)`` makes them)."""
        from ppdit.runtime.comm.mesh import Mesh

        pipe = self.pipeline or "step"
        axes = (("dp", dp), (pipe, self.stages), *((a, getattr(self, a)) for a in FORWARD))
        joint = (SEQUENCE,) + ((FORWARD,) if self.fsdp else ())
        return Mesh(axes, first_rank, self.pipeline, joint,
                    None if ranks_per_node is None else (SEQUENCE, ranks_per_node))


def _check_composition(m: Layout) -> None:
    """The one composition rule: ``ValueError`` naming what does not compose, and why."""
    if m.cfg > 2:
        raise ValueError(f"layout cfg={m.cfg} must be 1 or 2 (a guided step has two halves)")
    if sum(getattr(m, a) > 1 for a in PIPELINE_AXES) > 1:
        raise ValueError(f"layout {m}: {', '.join(PIPELINE_AXES)} do not compose (one pipeline "
                         "axis: a stage runs either whole steps or a run of the blocks)")
    if m.splits_blocks and m.split().keys() - {m.pipeline}:
        what = {"layer": "layer split", "pipefusion": "pipefusion"}[m.pipeline]
        raise ValueError(f"layout {m}: {what} stands alone (its stages hold runs of the "
                         "blocks and hand hidden states on; the forward axes act on whole "
                         "forwards): use step split to compose a pipeline with them")
    if m.tp > 1 and m.sp > 1:
        raise ValueError(f"layout {m}: tp and the sequence axes (ulysses, ring) do not compose "
                         "here: both split each attention (by heads, by tokens); use one or "
                         "the other in each forward")
    if m.fsdp and (m.cfg * m.sp == 1 or m.tp > 1):
        raise ValueError(f"layout {m}: fsdp shards the weights over the ranks that run one "
                         "forward block by block in lockstep (the all-gathers need it): the "
                         "sequence axes and the guidance halves, e.g. cfg=2,fsdp or "
                         "ulysses=2,fsdp; not alone (every rank would compute the same video) "
                         "nor with tp (its weights are split already)")


def parse_layout(text: str, ranks: int | None = None) -> Layout:
    """``"cfg=2,ulysses=2,fsdp"`` or a shorthand name with ``ranks`` (``"sp"``, 4 ->
    ulysses=4). A composed value fixes the ranks itself: a ``ranks`` given beside it must agree."""
    text = text.strip()
    if "=" not in text and "fsdp" not in text.split(","):
        return _shorthand(text, ranks)
    degrees: dict = {}
    for part in text.split(","):
        name, eq, value = part.partition("=")
        name = name.strip()
        if name == "fsdp":
            if eq:
                raise ValueError(f"layout fsdp is a flag, not a degree: it shards over the "
                                 f"cfg x ring x ulysses ranks; write 'fsdp' (in {text!r})")
            degrees["fsdp"] = True
            continue
        if name not in AXES:
            raise ValueError(f"layout axis {name!r} is not one of {(*AXES, 'fsdp')} "
                             f"(in {text!r})")
        if name in degrees:
            raise ValueError(f"layout axis {name!r} is given twice (in {text!r})")
        try:
            degrees[name] = int(value)
        except ValueError:
            raise ValueError(f"layout {name}={value.strip()!r} must be an integer "
                             f"(in {text!r})") from None
    layout = Layout(**degrees)
    if ranks is not None and ranks != layout.ranks:
        raise ValueError(f"layout {text!r} runs on {layout.ranks} ranks (the product of its "
                         f"degrees), but ranks={ranks}")
    return layout


def _shorthand(name: str, ranks: int | None) -> Layout:
    if name not in SHORTHANDS:
        raise ValueError(f"layout={name!r} is not one of {SHORTHANDS} nor axis=degree pairs "
                         f"over {AXES} (e.g. 'cfg=2,ulysses=2')")
    r = ranks if ranks is not None else {"single": 1, "pp_tp": 4, "usp": 4}.get(name, 2)
    if r < 1:
        raise ValueError(f"ranks={r} must be >= 1")
    if name == "single":
        if r != 1:
            raise ValueError(f"layout 'single' runs on 1 rank, got ranks={r}")
        return Layout()
    if name in ("pp_tp", "usp"):
        what = "stages of 2 TP ranks" if name == "pp_tp" else "a ring of 2 Ulysses groups"
        if r % 2 or r < 4:
            raise ValueError(f"layout {name!r} runs {what}: ranks={r} must be an even number >= 4")
        return Layout(step=r // 2, tp=2) if name == "pp_tp" else Layout(ulysses=r // 2, ring=2)
    if name == "cfg" and r != 2:
        raise ValueError(f"layout 'cfg' runs the conditional and unconditional halves on "
                         f"exactly 2 ranks, got ranks={r}")
    return Layout(**{{"sp": "ulysses"}.get(name, name): r})


def check_sp_degree(num_heads: int, degree: int) -> None:
    """V-Major and the two-phase (hierarchical) all-to-all cut even head chunks, so their
    degree must divide the heads; plain Ulysses and USP run any degree (``comms.head_split``)."""
    if degree < 1 or num_heads % degree:
        raise ValueError(f"sequence parallel degree {degree} must divide the {num_heads} "
                         f"attention heads for V-Major and the two-phase all-to-all (their "
                         f"chunks are heads/degree heads; plain Ulysses runs any degree)")


def check_tp_degree(config, tp: int) -> None:
    """Heads and FFN width must divide by ``tp`` (``ValueError`` otherwise).

    ``config``: a diffusers config (``model.config``) or a ``ModelPreset``. Heads are the unit
    of the attention split (a head cut in two would need its q.k dot product summed across
    ranks); FFN columns must split evenly so every rank's GEMM has the same shape."""
    if tp < 1:
        raise ValueError(f"tp={tp} must be >= 1")
    heads = getattr(config, "num_attention_heads", None) or config.num_heads
    for name, n, why in (("num_heads", heads, "tensor parallelism splits whole heads"),
                         ("ffn_dim", config.ffn_dim, "the FFN hidden features split evenly")):
        if n % tp:
            raise ValueError(f"{name}={n} is not divisible by the TP degree tp={tp}: {why} "
                             f"({n} % {tp} = {n % tp})")


def check_step_stages(num_steps: int, stages: int) -> None:
    """Step-split PP: every stage runs at least one step."""
    if stages > num_steps:
        raise ValueError(f"num_steps={num_steps} cannot be split over {stages} stages: "
                         "step-split PP needs at least one step per stage "
                         "(num_steps >= num_stages)")


def check_layer_stages(preset, stages: int) -> None:
    """Layer-split PP: every stage holds at least one block."""
    if stages > preset.num_layers:
        raise ValueError(f"layer-split over {stages} stages needs at least one block per "
                         f"stage, but {preset.name!r} has {preset.num_layers}")


def check_model(layout: Layout, preset, *, num_steps: int, latent_shape: tuple[int, ...],
                guided: bool = True) -> None:
    """The rules a layout owes the model and the request (``preset``: a ``ModelPreset``):
    whole heads per TP rank (Ulysses: any degree), a block or a step per stage, a token per
    sequence rank, and a second half for CFG-parallel. ``ValueError`` naming the rule and the
    values."""
    if layout.tp > 1:
        check_tp_degree(preset, layout.tp)
    if layout.splits_blocks:
        check_layer_stages(preset, layout.stages)
    check_step_stages(num_steps, layout.step)
    tokens = preset.num_tokens(latent_shape)
    if layout.sp > tokens:
        raise ValueError(f"ring x ulysses = {layout.sp} ranks exceed the {tokens} tokens: "
                         "sequence parallelism needs at least one token per rank")
    if layout.cfg == 2 and not guided:
        raise ValueError("CFG-parallel needs guidance on every step (guidance_scale != 1, "
                         "guidance_steps None): without it there is no second half")
