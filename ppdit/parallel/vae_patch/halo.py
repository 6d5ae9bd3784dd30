"""What travels between the ranks of a patch-parallel decode: halo rows and the gathered rows.

Rank r holds rows ``[start_r, stop_r)`` of every activation (the latent's row split, scaled by
each 2x upsample). A 3x3 conv's output row i reads input rows i - 1 .. i + 1, so each rank needs
``width = kernel // 2`` rows from each neighbour, the *halo*: of the conv's zero padding, the
rows facing a neighbour are overwritten with its edge rows, only the image border stays zero::

    rank 0   [ 0 0 0 ]  <- zero padding: the image's top border
             [ own rows of rank 0 ]
             [ rank 1's first rows ]  <- received (rank 0's last rows went down to rank 1)
    rank 1   [ rank 0's last rows ]
             [ own rows of rank 1 ]
             [ 0 0 0 ]  <- the bottom border

Every exchange is one fused ``Wire.batch``: a rank sends to and receives from each neighbour,
and under NCCL a receive posted ahead of the send its peer waits for would block. Every wait
has a timeout (``wait_for``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ppdit.parallel.partition import even_sizes
from ppdit.runtime.comm.wire import DEFAULT_TIMEOUT_S, Wire, wait_for

ROW_DIM = -2  # rows (height) are the second-to-last dim of every activation, 4D and 5D alike


def split_rows(height: int, parts: int, min_rows: int = 1) -> tuple[int, ...]:
    """Latent rows per rank, top to bottom, differing by at most one (upper ranks larger), at
    least ``min_rows`` (the widest halo) each: a halo then comes from the adjacent rank alone."""
    if parts < 1 or min_rows < 1:
        raise ValueError(f"parts={parts} and min_rows={min_rows} must be >= 1")
    if height < parts * min_rows:
        raise ValueError(
            f"height={height} latent rows cannot be split over {parts} ranks with at least "
            f"min_rows={min_rows} each (a rank's halo must come from its neighbour alone, so "
            f"height >= ranks * min_rows): use at most {height // min_rows} ranks")
    return tuple(even_sizes(height, parts))


def edge_rows(padded: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(first, last) ``width`` own rows of a tensor padded by ``width`` rows each side: what
    goes to the upper and to the lower neighbour (contiguous copies: on the wire)."""
    first = padded.narrow(ROW_DIM, width, width)
    last = padded.narrow(ROW_DIM, padded.shape[ROW_DIM] - 2 * width, width)
    return first.contiguous(), last.contiguous()


def place_halos(padded: torch.Tensor, upper: torch.Tensor | None, lower: torch.Tensor | None,
                width: int) -> torch.Tensor:
    """Write the neighbours' rows into the padding rows (in place); ``None`` (a true border)
    leaves the zeros the convolution's own padding would have given."""
    if upper is not None:
        padded.narrow(ROW_DIM, 0, width).copy_(upper)
    if lower is not None:
        padded.narrow(ROW_DIM, padded.shape[ROW_DIM] - width, width).copy_(lower)
    return padded


@dataclass(frozen=True)
class RowGroup:
    """The ranks that share a decode, top rows first, and how messages travel between them."""

    rank: int  # this rank's index in the group: 0 holds the top rows
    peers: tuple[int, ...]  # the global rank of each index (P2P addresses global ranks)
    group: object = None  # the process group (None: the world)
    wire: Wire = field(default_factory=Wire)  # how the halos travel (``ctx.wire``)
    timeout_s: float = DEFAULT_TIMEOUT_S

    @classmethod
    def of(cls, group, wire: Wire, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> RowGroup:
        """This process's place in ``group`` (the world when ``None``)."""
        size = dist.get_world_size(group)
        peers = tuple(r if group is None else dist.get_global_rank(group, r) for r in range(size))
        return cls(dist.get_rank(group), peers, group, wire, timeout_s)

    @property
    def world(self) -> int:
        """Ranks in the group."""
        return len(self.peers)

    @property
    def up(self) -> int | None:
        """Global rank of the neighbour holding the rows above, or None at the top."""
        return self.peers[self.rank - 1] if self.rank > 0 else None

    @property
    def down(self) -> int | None:
        """Global rank of the neighbour holding the rows below, or None at the bottom."""
        return self.peers[self.rank + 1] if self.rank + 1 < self.world else None

    def exchange(self, ops: list[tuple[str, torch.Tensor, int]], what: str) -> None:
        """Post ``ops`` as one batch and wait for all of them, each within the timeout.

        Staged (``wire.staged``: gloo moves only host memory), the transport sees only buffers
        on ``wire.buffers``: a tensor sent is copied there once (a gather sends one to every
        peer), a receive lands there and is copied into its tensor after. Same bytes."""
        if not ops:
            return
        moved, host = ops, self.wire.buffers
        if self.wire.staged:
            sent = {id(t): t for kind, t, _ in ops if kind == "send"}
            sent = {i: t.to(host, copy=True) for i, t in sent.items()}
            moved = [(kind, sent[id(t)] if kind == "send" else torch.empty_like(t, device=host),
                      peer) for kind, t, peer in ops]
        for work in self.wire.batch(moved, self.group):
            wait_for(work, self.timeout_s, what)
        for (kind, t, _), (_, buf, _) in zip(ops, moved, strict=True):
            if kind == "recv" and buf is not t:
                t.copy_(buf)  # staged: back to the rank's device


def fill_halos(padded: torch.Tensor, width: int, rows: RowGroup) -> torch.Tensor:
    """Exchange halos (in place) on a tensor already zero-padded by ``width`` rows each side,
    (..., own rows + 2 width, W'): (..., width, W') sent and received per neighbour."""
    first, last = edge_rows(padded, width)
    upper = lower = None
    ops = []
    if rows.up is not None:
        upper = torch.empty_like(first)
        ops += [("send", first, rows.up), ("recv", upper, rows.up)]
    if rows.down is not None:
        lower = torch.empty_like(last)
        ops += [("send", last, rows.down), ("recv", lower, rows.down)]
    rows.exchange(ops, f"halo exchange of rank {rows.rank}")
    return place_halos(padded, upper, lower, width)


def gather_rows(local: torch.Tensor, sizes: tuple[int, ...], rows: RowGroup, *, dim: int,
                dst: int | None = None) -> torch.Tensor | None:
    """Every rank's slice along ``dim`` joined in rank order: on every rank (``dst=None``), or
    on group index ``dst`` only (the others get ``None``). ``sizes`` is each rank's length
    along ``dim``; known to all, so no padding and no size message is needed."""
    local = local.contiguous()
    shape = list(local.shape)
    parts: list[torch.Tensor | None] = [None] * rows.world
    parts[rows.rank] = local
    ops = []
    for r, peer in enumerate(rows.peers):
        if r == rows.rank:
            continue
        if dst is None or dst == r:
            ops.append(("send", local, peer))
        if dst is None or dst == rows.rank:
            shape[dim] = sizes[r]
            parts[r] = local.new_empty(shape)
            ops.append(("recv", parts[r], peer))
    rows.exchange(ops, f"gathering rows on rank {rows.rank}")
    return None if dst not in (None, rows.rank) else torch.cat(parts, dim=dim)
