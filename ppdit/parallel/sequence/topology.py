"""A topology-aware all-to-all (CoCoDiff's Tile-Aware Parallel All-to-all, in its simplest form).

A flat all-to-all over N nodes of L ranks sends (N - 1) x L of each rank's messages, each
1/(N L) of its data, over the slow inter-node links. The hierarchical one uses two phases over
a (node x local) mesh::

    rank = node * L + local

    phase 1 (inside the node, fast links): to local peer l', everything bound for local
             index l' on any node
    phase 2 (across nodes, one peer per node): to (node m, my local index), everything my
             node's ranks have for it, in one message

The same bytes leave the node, but in N - 1 messages per rank of L times the size: fewer latency
terms (α) on the slow link, and on a cluster each rank's inter-node traffic on its own NIC. It
only moves values, so it equals the flat all-to-all bit for bit; the cost is a second pass over
the intra-node links. ``sizes[i][j]``: rows rank i sends rank j (known to every rank).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed._functional_collectives as funcol

from ppdit.runtime.comm.mesh import RankMesh


@dataclass
class Hierarchy:
    """This rank's two groups in a (node x local) arrangement of one group's ranks."""

    nodes: int
    local: int  # ranks per node
    index: int  # this rank's index in the whole group: node * local + local_index
    intra: object  # the ranks of my node (None: one rank per node)
    inter: object  # my local index on every node (None: one node)
    inter_bytes: int = 0  # what this rank sent across nodes (phase 2)
    intra_bytes: int = 0  # ... and inside its node (phase 1)
    inter_messages: int = 0

    def reset(self) -> None:
        """Zero the counters (a new round)."""
        self.inter_bytes = self.intra_bytes = self.inter_messages = 0

    def all_to_all(self, x: torch.Tensor, sizes: Sequence[Sequence[int]]) -> torch.Tensor:
        """``all_to_all_single`` in two phases: ``x`` holds my rows for each rank in order
        (``sizes[me]``); the result holds each rank's rows for me in order (``sizes[:][me]``)."""
        n_nodes, n_local = self.nodes, self.local
        node, lo = divmod(self.index, n_local)
        row = x.shape[1:]
        mine = x.split(list(sizes[self.index]))  # by destination rank
        # phase 1: to local peer p, my chunks for (m, p), m = 0..N-1
        send1 = [mine[m * n_local + p] for p in range(n_local) for m in range(n_nodes)]
        sent1 = [sum(sizes[self.index][m * n_local + p] for m in range(n_nodes))
                 for p in range(n_local)]
        from1 = [[sizes[node * n_local + q][m * n_local + lo] for m in range(n_nodes)]
                 for q in range(n_local)]  # from local q: its chunks for (m, my local index)
        got1 = _exchange(torch.cat(send1), [sum(f) for f in from1], sent1, self.intra, row)
        self.intra_bytes += _off_rank(send1, sent1, lo, x)
        pieces = got1.split([s for f in from1 for s in f])  # [q][m]
        # phase 2: to node m, the chunks of (node, q) for (m, lo), q = 0..L-1
        send2 = [pieces[q * n_nodes + m] for m in range(n_nodes) for q in range(n_local)]
        sent2 = [sum(from1[q][m] for q in range(n_local)) for m in range(n_nodes)]
        from2 = [sum(sizes[m * n_local + q][self.index] for q in range(n_local))
                 for m in range(n_nodes)]
        out = _exchange(torch.cat(send2), from2, sent2, self.inter, row)
        self.inter_bytes += _off_rank(send2, sent2, node, x)
        self.inter_messages += n_nodes - 1
        return out  # rows by source node, then source local index: rank order


def _exchange(x: torch.Tensor, out_sizes: list[int], in_sizes: list[int], group,
              row: torch.Size) -> torch.Tensor:
    if group is None:  # one rank on this axis: nothing moves
        return x
    out = funcol.all_to_all_single(x.contiguous(), out_sizes, in_sizes, group)
    return funcol.wait_tensor(out).view(-1, *row)


def _off_rank(chunks: list[torch.Tensor], sizes: list[int], me: int, like: torch.Tensor) -> int:
    """Bytes of the chunks that leave this rank (all but the ``me``-th destination's)."""
    per_row = like[0].numel() * like.element_size() if like.shape[0] else 0
    return (sum(sizes) - sizes[me]) * per_row


def hierarchy(mesh: RankMesh) -> Hierarchy | None:
    """This rank's (node x local) sequence groups as the mesh made them (None: no node groups)."""
    if mesh.node_groups is None:
        return None
    axes, per_node = mesh.mesh.nodes
    intra, inter = mesh.node_groups
    return Hierarchy(mesh.size(*axes) // per_node, per_node, mesh.index(*axes), intra, inter)
