"""A training stage's progress bar (tqdm, redrawn at most every two seconds)."""

from __future__ import annotations


def bar(total: int, desc: str):
    """A progress bar of ``total`` steps named ``desc``."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="step", mininterval=2.0)


__all__ = ["bar"]
