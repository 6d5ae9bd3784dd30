"""Reference solution of lab 01 (binary search would do too; this is the exact DP)."""

from __future__ import annotations

from collections.abc import Sequence


def split_steps(num_steps: int, num_stages: int,
                weights: Sequence[float] | None = None) -> list[range]:
    """Contiguous step ranges, one per stage, at least one step each; balanced by count, or
    by ``weights`` (minimise the most expensive stage)."""
    if num_steps < num_stages:
        raise ValueError(f"num_steps={num_steps} < num_stages={num_stages}: every stage needs "
                         "at least one step")
    if weights is None:
        base, extra = divmod(num_steps, num_stages)
        sizes = [base + (s < extra) for s in range(num_stages)]
    else:
        sizes = _balanced(list(weights), num_stages)
    out, start = [], 0
    for n in sizes:
        out.append(range(start, start + n))
        start += n
    return out


def _balanced(w: list[float], parts: int) -> list[int]:
    n = len(w)
    prefix = [0.0]
    for x in w:
        prefix.append(prefix[-1] + x)
    best = {(0, 0): (0.0, 0)}  # (parts used, items) -> (bottleneck, last cut)
    for k in range(1, parts + 1):
        for i in range(k, n - (parts - k) + 1):
            best[(k, i)] = min((max(best[(k - 1, j)][0], prefix[i] - prefix[j]), j)
                               for j in range(k - 1, i) if (k - 1, j) in best)
    sizes, i = [], n
    for k in range(parts, 0, -1):
        j = best[(k, i)][1]
        sizes.append(i - j)
        i = j
    return sizes[::-1]
