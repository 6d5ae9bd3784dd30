"""One rule for saying whether a measurement met its target, or changed, on a noisy machine.

One run's median flips with this 2-core machine's noise (the step-split handoff measured 1.07x
to 1.46x a bare send, same code), so a verdict comes from an interval, not a median: the
order-statistic interval for the median of the per-round values, which covers it with at least
``CONFIDENCE`` whatever their distribution (no normality assumed; it needs 5 rounds at 90%).
OK or MISSED is said only when the whole interval lies on one side of the target; otherwise the
verdict is "inconclusive here", with about how many rounds would settle it if the spread stayed
as it is (the interval narrows as 1/sqrt(rounds)). A comparison of two codes applies the same
rule to the per-round ratio of new to old, against 1. Benchmarks and lessons both use it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.9
BETTER = ("lower", "higher")


@dataclass(frozen=True)
class Verdict:
    """Per-round values against a target: the median, its interval and the word."""

    median: float
    interval: tuple[float, float] | None  # None: too few rounds for one
    rounds: int
    word: str  # OK, MISSED or "inconclusive here"; faster, slower or "no change ..."
    settle: int | None = None  # rounds that would likely settle an inconclusive verdict

    def describe(self, unit: str = "x", digits: int = 2) -> str:
        """"1.27x (1.07-1.46, 90% interval of 9 rounds)": the median as quoted everywhere."""
        med = f"{self.median:.{digits}f}{unit}"
        if self.interval is None:
            return f"{med} ({self.rounds} round(s): too few for an interval)"
        lo, hi = self.interval
        return (f"{med} ({lo:.{digits}f}-{hi:.{digits}f}, {CONFIDENCE:.0%} interval of "
                f"{self.rounds} rounds)")

    def says(self) -> str:
        """The word, and for an inconclusive one what would settle it."""
        if self.settle is not None:
            return f"{self.word} (about {self.settle} rounds would settle it)"
        if self.word == "inconclusive here":
            return f"{self.word} (the median sits at the target: more rounds will not settle it)"
        return self.word


def median_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """The order statistics (x_(k), x_(n+1-k)) with the largest k whose coverage of the median,
    1 - 2 P(Binomial(n, 1/2) < k), is at least ``CONFIDENCE``; None when no k reaches it."""
    xs, n = sorted(values), len(values)
    below, best = 0.0, None
    for k in range(1, n // 2 + 1):
        below += math.comb(n, k - 1) / 2 ** n  # P(Binomial(n, 1/2) <= k - 1)
        if 1 - 2 * below >= CONFIDENCE:
            best = k
    return None if best is None else (xs[best - 1], xs[n - best])


MIN_ROUNDS = next(n for n in range(1, 64) if median_interval([0.0] * n))  # 5 at 90%


def verdict(values: Sequence[float], target: float, better: str = "lower") -> Verdict:
    """OK, MISSED or "inconclusive here" for per-round ``values`` against ``target``
    (``better``: "lower" for a bound from above, such as a cost; "higher" from below)."""
    if better not in BETTER:
        raise ValueError(f"better={better!r} must be one of {BETTER}")
    if not values:
        raise ValueError("a verdict needs at least one round")
    med, interval = statistics.median(values), median_interval(values)
    if interval is None:
        return Verdict(med, None, len(values), "inconclusive here", MIN_ROUNDS)
    lo, hi = interval
    good, bad = (hi <= target, lo > target) if better == "lower" else (lo >= target, hi < target)
    if good or bad:
        return Verdict(med, interval, len(values), "OK" if good else "MISSED")
    return Verdict(med, interval, len(values), "inconclusive here",
                   _rounds_to_settle(len(values), interval, med, target))


def change(new_over_old: Sequence[float], better: str = "lower") -> Verdict:
    """"faster", "slower" or "no change this machine can see", from the per-round ratios of a
    new code's value to an old one's, measured in the same rounds (``better`` as in verdict)."""
    v = verdict(new_over_old, 1.0, better)
    word = {"OK": "faster", "MISSED": "slower"}.get(v.word, "no change this machine can see")
    if v.interval is not None and v.interval[0] <= 1.0 <= v.interval[1]:
        word = "no change this machine can see"  # 1.0 itself inside: neither side
    return Verdict(v.median, v.interval, v.rounds, word, v.settle)


def _rounds_to_settle(n: int, interval: tuple[float, float], med: float,
                      target: float) -> int | None:
    """Rounds for the interval's half-width to shrink below the median's distance to the
    target; None when that is over 20 times ``n`` (the median sits at the target)."""
    half, gap = (interval[1] - interval[0]) / 2, abs(med - target)
    need = math.ceil(n * (half / gap) ** 2) if gap else math.inf
    return max(n + 1, need) if need <= 20 * n else None
