"""The α-β model of collectives: what each primitive costs on a link, and which algorithm wins.

One message of ``n`` bytes over a link costs ``α + n / β``: a fixed latency ``α`` (software on
both ends, the wire's delay, a synchronisation) and a transfer at bandwidth ``β`` (bytes/s per
direction). A collective costs ``(message steps) · α + (bytes each rank sends) / β`` (Thakur,
Rabenseifner and Gropp, "Optimization of Collective Communication Operations in MPICH", 2005):
latency-bound below ``n = α · β`` bytes, bandwidth-bound above.

All-reduce by **ring** (Patarasuk and Yuan, "Bandwidth Optimal All-reduce Algorithms for
Clusters of Workstations", 2009) is a reduce-scatter then an all-gather around the ring:
``2 (p - 1)`` steps, each rank sending ``2 (p - 1) / p · n`` bytes — the least any all-reduce
can send. By **(double binary) tree**, the data is reduced up a tree and broadcast down it,
pipelined in chunks: ``2 ⌈log2 p⌉`` steps, and about ``2 n`` bytes in and out of each rank (two
trees each carry half the data; a rank is inside one tree and a leaf of the other). So the ring
has the better bandwidth term by a factor ``(p - 1) / p`` and the tree the far better latency
term: the tree wins below a crossover size that grows about as ``p² · α · β``.

These are the textbook forms, not NCCL's tuner (which also models channels, protocols and its
measured per-hop latencies, and picks per call): use them to reason about orders of magnitude
and trends, and nccl-tests to measure a machine."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ppdit.analysis.alltoall import Link
from ppdit.analysis.hardware import LINKS

# InfiniBand is not in hardware.LINKS (which lists the GPU-to-GPU links of one box): NDR is
# 400 Gb/s per port (ConnectX-7 datasheet), i.e. 50 GB/s per direction; DGX/HGX H100 nodes have
# one such port per GPU, so it is each GPU's bandwidth to other nodes.
INFINIBAND_NDR = "InfiniBand NDR"
IB_NDR_BYTES_S = 400e9 / 8

# α per message: ASSUMED typical values, not measurements. NCCL's per-hop latency is about 1 us
# with its LL protocol, 2 us with LL128 and 6 us with Simple (Hu et al., "Demystifying NCCL",
# arXiv 2507.04786, 2025), plus a microsecond or two over PCIe or across nodes. Crossover sizes
# scale linearly with α: measure yours with nccl-tests before relying on one.
ALPHA_S = {"NVLink 4": 2e-6, "PCIe Gen4 x16": 5e-6, INFINIBAND_NDR: 6e-6}
BETA_BYTES_S = {"NVLink 4": LINKS["NVLink 4"], "PCIe Gen4 x16": LINKS["PCIe Gen4 x16"],
                INFINIBAND_NDR: IB_NDR_BYTES_S}


def links() -> dict[str, Link]:
    """The lesson's three links as ``alltoall.Link`` values (assumed α, datasheet β)."""
    return {name: Link(ALPHA_S[name], BETA_BYTES_S[name]) for name in ALPHA_S}


def log2_steps(p: int) -> int:
    """Levels of a binary tree over ``p`` ranks: ⌈log2 p⌉ (a tree's depth, in messages)."""
    _check_ranks(p)
    return math.ceil(math.log2(p))


def ring_allreduce_seconds(n: float, p: int, link: Link) -> float:
    """Ring all-reduce of ``n`` bytes on every rank: 2(p-1) α + 2(p-1)/p · n / β."""
    _check_ranks(p)
    return 2 * (p - 1) * link.alpha_s + 2 * (p - 1) / p * n / link.beta_bytes_s


def tree_allreduce_seconds(n: float, p: int, link: Link) -> float:
    """Pipelined (double binary) tree all-reduce: 2 ⌈log2 p⌉ α + 2 n / β."""
    return 2 * log2_steps(p) * link.alpha_s + 2 * n / link.beta_bytes_s


def ring_tree_crossover_bytes(p: int, link: Link) -> float:
    """The size below which the tree all-reduce is faster: ring - tree = 2 α (p - 1 - L)
    - 2 n / (p β) with L = ⌈log2 p⌉, zero at n = p α β (p - 1 - L). 0 for p <= 2 (there the
    two have the same steps and the ring sends less: it is never slower)."""
    return max(0.0, p * link.alpha_s * link.beta_bytes_s * (p - 1 - log2_steps(p)))


@dataclass(frozen=True)
class Cost:
    """One primitive's α-β cost: ``steps`` latencies plus ``sent`` bytes from each rank."""
    name: str
    algorithm: str
    steps_formula: str  # in p
    sent_formula: str  # in n (bytes of the tensor named in ``n_is``) and p
    n_is: str
    steps: int
    sent: float
    n: float

    @property
    def sent_per_n(self) -> float:
        """Bytes sent per byte of ``n``: nccl-tests' "bus bandwidth" factor (busbw = algbw x
        this), which makes a collective's bandwidth comparable with its link's."""
        return self.sent / self.n

    def seconds(self, link: Link) -> float:
        return self.steps * link.alpha_s + self.sent / link.beta_bytes_s


def collective_costs(n: float, p: int) -> list[Cost]:
    """The primitives of the lesson, each by the algorithm NCCL and MPI use for large messages,
    for a tensor of ``n`` bytes (see ``n_is``) over ``p`` ranks. Broadcast and reduce are
    pipelined along a chain, so their bandwidth term is one n whatever p."""
    _check_ranks(p)
    q = (p - 1) / p
    return [
        Cost("send/recv", "one message", "1", "n", "the message", 1, n, n),
        Cost("broadcast", "pipelined chain", "p - 1", "n", "the tensor", p - 1, n, n),
        Cost("reduce", "pipelined chain", "p - 1", "n", "the tensor", p - 1, n, n),
        Cost("all-reduce", "ring", "2(p - 1)", "2(p-1)/p · n", "the tensor", 2 * (p - 1),
             2 * q * n, n),
        Cost("reduce-scatter", "ring", "p - 1", "(p-1)/p · n", "the input (p shards)", p - 1,
             q * n, n),
        Cost("all-gather", "ring", "p - 1", "(p-1)/p · n", "the output (p shards)", p - 1,
             q * n, n),
        Cost("all-to-all", "one message per peer", "p - 1", "(p-1)/p · n",
             "each rank's buffer", p - 1, q * n, n),
    ]


@dataclass(frozen=True)
class AlphaBeta:
    """A fitted link: latency ``alpha_s`` and bandwidth ``beta_bytes_s``."""
    alpha_s: float
    beta_bytes_s: float

    @property
    def crossover_bytes(self) -> float:
        """n = α β: below it the latency term is the larger, above it the bandwidth term."""
        return self.alpha_s * self.beta_bytes_s

    def seconds(self, n: float) -> float:
        return self.alpha_s + n / self.beta_bytes_s

    @property
    def link(self) -> Link:
        """The same numbers as an ``alltoall.Link``, for the cost formulas."""
        return Link(self.alpha_s, self.beta_bytes_s)


def fit_alpha_beta(nbytes: Sequence[float], seconds: Sequence[float]) -> AlphaBeta:
    """Least squares of ``t = α + n / β`` on (size, time) points, each weighted by 1 / t², so
    that every point's *relative* error counts the same: unweighted, the largest message (ms)
    would outweigh the smallest (us) and α would be whatever the big points' noise leaves over,
    even negative. Closed form: minimise Σ ((t - α - γ n) / t)² over α and γ = 1 / β."""
    if len(nbytes) != len(seconds) or len(set(nbytes)) < 2:
        raise ValueError(f"fit_alpha_beta needs >= 2 distinct sizes with one time each, got "
                         f"{len(nbytes)} sizes ({len(set(nbytes))} distinct), "
                         f"{len(seconds)} times")
    if min(seconds) <= 0:
        raise ValueError(f"times must be > 0 s, got a minimum of {min(seconds)}")
    w = [1 / t**2 for t in seconds]
    sw = sum(w)
    swn = sum(wi * n for wi, n in zip(w, nbytes, strict=True))
    swnn = sum(wi * n * n for wi, n in zip(w, nbytes, strict=True))
    swt = sum(wi * t for wi, t in zip(w, seconds, strict=True))
    swnt = sum(wi * n * t for wi, n, t in zip(w, nbytes, seconds, strict=True))
    det = sw * swnn - swn**2
    alpha = (swnn * swt - swn * swnt) / det
    gamma = (sw * swnt - swn * swt) / det
    if alpha <= 0 or gamma <= 0:
        raise ValueError(f"the points do not follow t = α + n/β with positive α and β "
                         f"(fit: α = {alpha:.3g} s, 1/β = {gamma:.3g} s/B): more sizes, or "
                         "more rounds per size?")
    return AlphaBeta(alpha, 1 / gamma)


def readable_bytes(n: float) -> str:
    """"900 kB", "28.8 MB", "231 GB": a size as a table prints it (SI units, 3 digits)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def _check_ranks(p: int) -> None:
    if not isinstance(p, int) or p < 2:
        raise ValueError(f"p={p!r}: a collective needs an integer number of ranks >= 2")
