"""StreamDiffusionV2's block rebalancing rule, restated from its description (``streamv2v``'s
``compute_balanced_split``) for a side-by-side test with ``partition.rebalanced_sizes``.

The rule: a block costs the mean DiT time per block (all ranks' DiT time over all blocks); each
rank's gap to the mean rank time is turned into that many blocks, rounded, and the counts are
then nudged until they sum to the total (added to the smallest counts first, taken from the
largest). Counts may reach zero.
"""

from __future__ import annotations


def their_sizes(sizes: list[int], rank_s: list[float], block_s: list[float]) -> list[int]:
    """Blocks per rank by StreamDiffusionV2's rule."""
    total, n = sum(sizes), len(sizes)
    per_block = sum(block_s) / total
    mean = sum(rank_s) / n
    target = [max(0, round(c + (mean - t) / per_block)) for c, t in zip(sizes, rank_s, strict=True)]
    step = 0
    while sum(target) != total:
        grow = sum(target) < total
        order = sorted(range(n), key=lambda i: (target[i], i), reverse=not grow)
        i = order[step % n]
        if grow or target[i] > 0:
            target[i] += 1 if grow else -1
        step += 1
    return target


def bottleneck(sizes: list[int], costs: list[float], extra: list[float]) -> float:
    """The slowest rank's time when rank r runs the next ``sizes[r]`` blocks of ``costs`` and
    also spends ``extra[r]``."""
    out, start = [], 0
    for n, e in zip(sizes, extra, strict=True):
        out.append(sum(costs[start:start + n]) + e)
        start += n
    return max(out)
