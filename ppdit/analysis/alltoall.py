"""The α-β cost of one all-to-all over N nodes of L ranks, flat or in two phases (CoCoDiff's TAPA).

Each rank holds one chunk of ``m`` bytes for every rank; a message costs ``α + bytes / β`` on
its link, a rank's messages on one link going one after another.

* **Flat**: L - 1 messages of m inside the node, (N - 1) L of m across, the two links at once.
* **Two-phase** (``parallel.sequence.topology``): L - 1 messages of N m inside the node, then
  N - 1 of L m across, one per node.

The same bytes cross the nodes; the two-phase one trades (N - 1)(L - 1) inter-node latencies for
a second pass over the fast links: it wins for small (latency-bound) messages and loses for
large ones, unless what this model leaves out dominates (ranks sharing a NIC, congestion, or
each rank's phase 2 on its own NIC, which CoCoDiff's Aurora measurements exercise)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    """One kind of link: latency per message and bandwidth per direction."""
    alpha_s: float
    beta_bytes_s: float

    def seconds(self, messages: int, bytes_each: float) -> float:
        """``messages`` sent one after another, ``bytes_each`` bytes each."""
        return messages * (self.alpha_s + bytes_each / self.beta_bytes_s)


def flat_seconds(chunk_bytes: float, nodes: int, local: int, intra: Link, inter: Link) -> float:
    """A flat all-to-all: the intra- and inter-node messages on their own links, side by side."""
    return max(intra.seconds(local - 1, chunk_bytes),
               inter.seconds((nodes - 1) * local, chunk_bytes))


def two_phase_seconds(chunk_bytes: float, nodes: int, local: int, intra: Link,
                      inter: Link) -> float:
    """Phase 1 inside the node, then one message per remote node."""
    return (intra.seconds(local - 1, nodes * chunk_bytes)
            + inter.seconds(nodes - 1, local * chunk_bytes))


def crossover_bytes(nodes: int, local: int, intra: Link, inter: Link) -> float | None:
    """The chunk size above which the flat all-to-all is predicted faster (``None``: the
    two-phase one is never slower, or never faster). Found by bisection on a log scale."""
    def two_phase_wins(m: float) -> bool:
        return two_phase_seconds(m, nodes, local, intra, inter) < flat_seconds(
            m, nodes, local, intra, inter)

    lo, hi = 1.0, 1e12
    if two_phase_wins(lo) == two_phase_wins(hi):
        return None
    for _ in range(200):
        mid = (lo * hi) ** 0.5
        if two_phase_wins(mid) == two_phase_wins(lo):
            lo = mid
        else:
            hi = mid
    return hi
