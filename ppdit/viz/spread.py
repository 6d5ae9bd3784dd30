"""Error bars from repeated measurements: one rule for every figure that prints a spread.

A figure draws the median and, as its bar, the fastest and slowest repeat, the same min–max the
cell prints with ``ppdit.teaching.quote.spread``. Rows without repeats get no bar rather than
an error, and a bar never has a negative side (the median is always inside its own range)."""

from __future__ import annotations

from collections.abc import Sequence


def min_max_err(medians: Sequence[float], runs: Sequence[Sequence[float]]) -> list[list[float]]:
    """``xerr`` / ``yerr`` for matplotlib: distances from each median down to its fastest run
    and up to its slowest (same unit as the medians)."""
    lo = [min([m, *r]) for m, r in zip(medians, runs, strict=True)]
    hi = [max([m, *r]) for m, r in zip(medians, runs, strict=True)]
    return [[m - a for m, a in zip(medians, lo, strict=True)],
            [b - m for m, b in zip(medians, hi, strict=True)]]


def count_label(runs: Sequence[Sequence[float]], noun: str) -> str:
    """"3 rounds", or "2–3 rounds" when rows ran different numbers (a range, not a claim that
    all ran 3); "0 rounds" when none carries any."""
    counts = sorted({len(r) for r in runs if r})
    if not counts:
        return f"0 {noun}s"
    n = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    return f"{n} {noun}" + ("" if n == "1" else "s")
