"""What the patch-decode tests run on ranks (spawn needs an importable module): the decode with
a spy on both sides of ``RowGroup.exchange``, to see which tensors the transport was handed."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ppdit.parallel.vae_patch.decode import decode_patch_parallel
from ppdit.parallel.vae_patch.halo import RowGroup
from ppdit.runtime.comm.wire import Wire
from ppdit.runtime.processes.rank import RankContext


@dataclass(frozen=True)
class SpyWire(Wire):
    """The rank's wire, noting the storage of every tensor handed to the transport."""

    handed: list = field(default_factory=list)  # per batch: a set of storage addresses

    def batch(self, ops, group=None) -> list:
        self.handed.append({t.untyped_storage().data_ptr() for _, t, _ in ops})
        return super().batch(ops, group)


@dataclass(frozen=True)
class SpyRows(RowGroup):
    """A row group counting, per exchange, the decode's own tensors the transport was handed
    (compared within the exchange, while all of them are alive: no address is reused)."""

    own_on_wire: list = field(default_factory=list)

    def exchange(self, ops, what: str) -> None:
        mine = {t.untyped_storage().data_ptr() for _, t, _ in ops}
        super().exchange(ops, what)
        self.own_on_wire.append(len(mine & self.wire.handed[-1]))


def spied_patch_decode(ctx: RankContext, vae, latents: torch.Tensor) -> dict:
    """``decode_patch_parallel`` over every rank (gather="all") through the spies: the video,
    whether the wire was staged, and per exchange how many of the decode's tensors it moved."""
    w = ctx.wire
    rows = SpyRows.of(None, SpyWire(w.device, w.staged, w.rules))
    video = decode_patch_parallel(vae.to(ctx.device), latents.to(ctx.device), rows)
    return {"video": video.cpu(), "staged": w.staged, "own_on_wire": rows.own_on_wire}
