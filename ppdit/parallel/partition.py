"""Contiguous partitions of a sequence of costs: the step split and the block split share them."""

from __future__ import annotations

import itertools
from collections.abc import Sequence


def even_sizes(n: int, parts: int) -> list[int]:
    """``parts`` sizes summing to ``n`` that differ by at most one (earlier parts larger)."""
    base, extra = divmod(n, parts)
    return [base + (1 if k < extra else 0) for k in range(parts)]


def expert_sizes(experts: Sequence[int], parts: int) -> list[int]:
    """Contiguous sizes that never straddle Wan 2.2's expert boundary (``experts``: each step's,
    0s then 1s): parts dealt to the experts so that the longest, what bounds a filled pipeline,
    is shortest. T2V A14B's 26 + 14 steps on 2 parts: 26 and 14; on 3: 13, 13 and 14."""
    n, n0 = len(experts), list(experts).count(0)
    if n0 in (0, n) or parts == 1:
        return even_sizes(n, parts)
    fits = [k for k in range(1, parts) if k <= n0 and parts - k <= n - n0]
    k = min(fits, key=lambda k: (max(-(-n0 // k), -(-(n - n0) // (parts - k))), k))
    return even_sizes(n0, k) + even_sizes(n - n0, parts - k)


def balanced_sizes(costs: Sequence[float], parts: int,
                   extra: Sequence[float] | None = None) -> list[int]:
    """Sizes of the contiguous split of ``costs`` into ``parts`` non-empty pieces that minimises
    the most expensive piece (what bounds a pipeline's throughput); ``extra[k]``: what part k
    costs besides its items (a rank that also decodes). Exact, by dynamic programming over
    prefix sums: best[k][i] = cheapest bottleneck for the first i items on k parts. O(parts *
    n^2), trivial for steps and blocks."""
    n = len(costs)
    if not 1 <= parts <= n:
        raise ValueError(f"cannot split {n} items into {parts} non-empty parts")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(parts + 1)]
    cut = [[0] * (n + 1) for _ in range(parts + 1)]
    best[0][0] = 0.0
    for k in range(1, parts + 1):
        for i in range(k, n - (parts - k) + 1):
            for j in range(k - 1, i):
                cost = max(best[k - 1][j], prefix[i] - prefix[j] + (extra[k - 1] if extra else 0))
                if cost < best[k][i] - 1e-12:
                    best[k][i], cut[k][i] = cost, j
    sizes, i = [], n
    for k in range(parts, 0, -1):
        j = cut[k][i]
        sizes.append(i - j)
        i = j
    return sizes[::-1]


def rebalanced_sizes(sizes: Sequence[int], rank_s: Sequence[float],
                     block_s: Sequence[float]) -> list[int]:
    """Blocks per rank recomputed from one measured round (StreamDiffusionV2's rebalancing,
    solved exactly): rank r ran ``sizes[r]`` blocks in ``block_s[r]`` seconds of its
    ``rank_s[r]``; each of those blocks costs its share of ``block_s[r]`` wherever it moves,
    and the rest of a rank's time (the decode rank 0 also does) stays with the rank."""
    costs = [t / n for t, n in zip(block_s, sizes, strict=True) for _ in range(n)]
    return balanced_sizes(costs, len(sizes),
                          [r - b for r, b in zip(rank_s, block_s, strict=True)])


def forced_costs(sizes: Sequence[int]) -> tuple[float, ...]:
    """Block costs whose exact split (``balanced_sizes``) is ``sizes``: each part's blocks cost
    1 / its size, so every part totals 1 and any other contiguous split puts more on one."""
    return tuple(1 / n for n in sizes for _ in range(n))


def to_ranges(sizes: Sequence[int]) -> list[range]:
    """Consecutive ranges with the given sizes, starting at 0."""
    return [range(a, b) for a, b in itertools.pairwise(itertools.accumulate(sizes, initial=0))]
