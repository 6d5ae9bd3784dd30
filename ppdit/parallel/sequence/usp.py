"""USP (xDiT's unified sequence parallelism): Ulysses inside, ring attention across.

Ulysses stops at the head count; ring attention has no such limit but sends every K/V block
P - 1 hops. USP arranges a forward's ranks as ``ring x ulysses``: a Ulysses group of U ranks
trades its token slices for a head split (each rank then holds the group's tokens for H/U
heads), the R groups pass those runs around a ring, and the output goes back to the token split::

    (B, S_i, H, hd) --Ulysses a2a--> (B, S_group, H/U, hd) --ring over R--> same --a2a back-->

On 8 ranks and 12 heads: U = 4 (3 heads each; any U runs, ``comms.head_split``), R = 2: the
all-to-alls stay among the U closest ranks (one node), only K/V blocks cross the ring.
Tolerance: ``ring.RING_TOL``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ppdit.attention import install
from ppdit.parallel.sequence.comms import A2ACounter, head_split, heads_to_seq, seq_to_heads
from ppdit.parallel.sequence.ring import Ring, RingAttnProcessor, ring_attention
from ppdit.runtime.comm.mesh import RankMesh
from ppdit.runtime.comm.wire import Wire
from ppdit.runtime.observe.trace import Tracer


class USPAttnProcessor(RingAttnProcessor):
    """Wan's self-attention on a token slice: ring attention inside Ulysses' all-to-alls."""

    def __init__(self, ulysses_group, ulysses_split: tuple[int, ...], ulysses_rank: int,
                 ring: Ring, counter: A2ACounter):
        super().__init__(ring)
        self.a2a = dict(split=ulysses_split, group=ulysses_group, rank=ulysses_rank,
                        counter=counter, wire=ring.wire)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """To the head split over the Ulysses group, around the ring, back to my tokens."""
        with self.ring.span("wait", "all-to-all q, k, v"):
            far = [seq_to_heads(x, **self.a2a).wait() for x in (q, k, v)]
        out = ring_attention(*far, self.ring).type_as(q)  # my heads, the group's tokens
        with self.ring.span("wait", "all-to-all out"):
            return heads_to_seq(out.contiguous(), **self.a2a,
                                heads=head_split(q.shape[2], len(self.a2a["split"])))


def install_usp(model, mesh: RankMesh, split: tuple[int, ...], wire: Wire, *,
                tracer: Tracer | None = None) -> tuple[A2ACounter, Ring]:
    """Route every block's self-attention through USP on ``mesh``: the a2a counter, the ring."""
    ulysses, ring_size = mesh.size("ulysses"), mesh.size("ring")
    # the token split (a slice per rank) as the Ulysses groups': [ring index] -> their slices
    by_group = tuple(tuple(split[r * ulysses:(r + 1) * ulysses]) for r in range(ring_size))
    blocks = tuple(sum(s) for s in by_group)
    ring_group = mesh.group("ring")
    ring = Ring(ring_group, blocks, dist.get_rank(ring_group), wire, tracer)
    counter = A2ACounter()
    processor = USPAttnProcessor(mesh.group("ulysses"), by_group[mesh.coords["ring"]],
                                 mesh.coords["ulysses"], ring, counter)
    install(model, lambda i: processor)
    return counter, ring
