"""One value for how a generation is spread over ranks: ``Layout(cfg=2, ulysses=2, ring=2)``.

Each field is the degree of one axis (1: not split along it)::

    cfg      the conditional and unconditional halves of a guided step on 2 branches
    ulysses  Ulysses sequence parallelism (all-to-alls to a head split: divides the heads)
    ring     ring attention (K/V blocks around a ring: any head count)
    tp       tensor parallelism (the weights split, an all-reduce per block)
    step     step split: pipeline stages that each run a run of the steps
    layer    layer split: pipeline stages that each hold a run of the blocks
    fsdp     the blocks' weights sharded over the same ranks (FSDP2): 1, or all of them

The ranks are the product of the others (``fsdp`` adds none: it shards over them).
``--layout cfg=2,ulysses=2,ring=2`` is parsed by ``parse_layout``; the single names of earlier
releases stay as shorthands (``sp`` on 4 ranks is ``ulysses=4``). Which axes compose is the
rule of ``t2v.layouts.plan_for``: the sequence axes with CFG (xDiT's CFG x USP), FSDP beside
them or beside CFG alone (Wan's recipe), step split with TP; a composition outside those is
refused with the rule named.

It imports nothing heavy: the CLI parses a layout without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

AXES = ("cfg", "ulysses", "ring", "tp", "step", "layer", "fsdp")
# name -> the axes it sets, given the ranks (pp_tp: stages of 2 TP ranks)
SHORTHANDS = ("single", "step", "layer", "tp", "sp", "ring", "usp", "pp_tp", "cfg")


@dataclass(frozen=True)
class Layout:
    """The degree of every axis; the ranks are their product."""

    cfg: int = 1
    ulysses: int = 1
    ring: int = 1
    tp: int = 1
    step: int = 1
    layer: int = 1
    fsdp: int = 1

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"layout {f.name}={value!r} must be an integer >= 1")
        if self.cfg > 2:
            raise ValueError(f"layout cfg={self.cfg} must be 1 or 2 (a guided step has two "
                             "halves)")
        if self.fsdp > 1 and self.ranks == 1:
            raise ValueError(f"layout fsdp={self.fsdp} alone: every rank would compute the same "
                             "video. Shard beside the axes that split the work, e.g. "
                             f"cfg=2,fsdp=2 (a guidance half each) or ulysses={self.fsdp},"
                             f"fsdp={self.fsdp}")
        if self.fsdp > 1 and self.fsdp != self.ranks:
            raise ValueError(f"layout fsdp={self.fsdp} shards the weights over every rank of "
                             f"the layout, so it must equal its {self.ranks} ranks (e.g. "
                             "ulysses=2,fsdp=2)")

    @property
    def ranks(self) -> int:
        """World size: the product of the degrees (fsdp shards over them, adding none)."""
        n = 1
        for name in AXES[:-1]:
            n *= getattr(self, name)
        return n

    def split(self) -> dict[str, int]:
        """The axes with a degree above 1."""
        return {name: getattr(self, name) for name in AXES if getattr(self, name) > 1}

    def __str__(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.split().items()) or "single"


def parse_layout(text: str, ranks: int | None = None) -> Layout:
    """``"cfg=2,ulysses=2"`` or a shorthand name with ``ranks`` (``"sp"``, 4 -> ulysses=4).

    A composed value fixes the ranks itself: a ``ranks`` given beside it must agree."""
    text = text.strip()
    if "=" not in text:
        return _shorthand(text, ranks)
    degrees = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        name = name.strip()
        if name not in AXES:
            raise ValueError(f"layout axis {name!r} is not one of {AXES} (in {text!r})")
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
    if name == "pp_tp":
        if r % 2 or r < 4:
            raise ValueError(f"layout 'pp_tp' runs stages of 2 TP ranks: ranks={r} must be "
                             "an even number >= 4")
        return Layout(step=r // 2, tp=2)
    if name == "usp":
        if r % 2 or r < 4:
            raise ValueError(f"layout 'usp' runs a ring of 2 Ulysses groups: ranks={r} must "
                             "be an even number >= 4")
        return Layout(ulysses=r // 2, ring=2)
    if name == "cfg" and r != 2:
        raise ValueError(f"layout 'cfg' runs the conditional and unconditional halves on "
                         f"exactly 2 ranks, got ranks={r}")
    return Layout(**{{"sp": "ulysses"}.get(name, name): r})


__all__ = ["AXES", "SHORTHANDS", "Layout", "parse_layout"]
