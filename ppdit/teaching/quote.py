"""Numbers as a lesson quotes them: a median with its spread, never a lone figure.

A timing on a shared machine is a distribution, not a number. Every measured time or ratio a
notebook prints goes through these helpers, so each sentence carries the median, the range and
how many interleaved rounds they come from: "12.3 ms (11.8-13.1, 5 rounds)"."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import torch

from ppdit.runtime.rounds import median_ratio, ratios

UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6}


def spread(values_s: Sequence[float], unit: str = "ms", digits: int = 1) -> str:
    """Seconds as "median unit (min-max, n rounds)"; one value prints as itself."""
    if unit not in UNITS:
        raise ValueError(f"unit={unit!r} is not one of {sorted(UNITS)}")
    if not values_s:
        raise ValueError("spread() needs at least one measurement")
    k = UNITS[unit]
    med, lo, hi = statistics.median(values_s) * k, min(values_s) * k, max(values_s) * k
    if len(values_s) == 1:
        return f"{med:.{digits}f} {unit} (1 round)"
    return f"{med:.{digits}f} {unit} ({lo:.{digits}f}-{hi:.{digits}f}, {len(values_s)} rounds)"


def ratio_spread(num: Sequence[float], den: Sequence[float], digits: int = 2) -> str:
    """"1.66x (1.58-1.71, 3 rounds)": the median of per-round ratios, with their range."""
    r = ratios(num, den)
    med = median_ratio(num, den)
    if len(r) == 1:
        return f"{med:.{digits}f}x (1 round)"
    return f"{med:.{digits}f}x ({min(r):.{digits}f}-{max(r):.{digits}f}, {len(r)} rounds)"


def agreement(actual: torch.Tensor, expected: torch.Tensor, tol: dict, name: str) -> str:
    """"within CAUSAL_TOL (rtol 1e-04, atol 1e-05): True": a comparison as a notebook prints it
    where nbval compares the output. The residue itself (7.2e-07 here, 6.0e-07 on another
    CPU) depends on the kernels a machine picks; the verdict against a named tolerance does
    not, so the residue goes to a cell whose output nbval ignores."""
    ok = torch.allclose(actual, expected, rtol=tol["rtol"], atol=tol["atol"])
    return f"within {name} (rtol {tol['rtol']:.0e}, atol {tol['atol']:.0e}): {ok}"


def residue(actual: torch.Tensor, expected: torch.Tensor) -> str:
    """"max |difference| 7.2e-07": for cells nbval does not compare (machine-specific)."""
    return f"max |difference| {(actual - expected).abs().max().item():.1e}"
