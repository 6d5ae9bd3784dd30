"""What every benchmark prints and keeps: each target's verdict over its rounds, and one line per
run in ``results.jsonl``.

A target is checked against per-round values, each measured against a baseline of the same
round (a bare send, torch's own schedule, the machine's two-independent-ranks ceiling), never a
lone median: OK or MISSED only when the median's whole interval is on one side of the target,
else "inconclusive here" with about how many rounds would settle it (``ppdit.teaching.verdict``,
the rule the lessons use too). Every run appends the machine, the commit and every ratio with
its interval to ``results.jsonl``, so that the next change can be compared with it
(``scripts/bench_compare.py`` compares two commits side by side instead).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ppdit.gpu_check.env import git_state
from ppdit.teaching.verdict import verdict

RESULTS = Path(__file__).with_name("results.jsonl")
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Target:
    """A per-round measurement and the bound it must keep (``better``: "lower" or "higher")."""

    name: str
    values: Sequence[float]
    bound: float
    better: str = "lower"
    unit: str = "x"
    digits: int = 2

    def check(self) -> dict:
        """The verdict as printed and kept: median, interval, rounds, word."""
        v = verdict(self.values, self.bound, self.better)
        op = "<=" if self.better == "lower" else ">="
        return {"name": self.name, "median": v.median, "interval": v.interval,
                "rounds": v.rounds, "target": f"{op} {self.bound:.3g}{self.unit}",
                "verdict": v.word, "settle": v.settle, "values": list(self.values),
                "line": f"{v.describe(self.unit, self.digits)}; target {op} "
                        f"{self.bound:.3g}{self.unit}: {v.says()}"}


Rounds = dict[str, list[float]]


def until_settled(measure: Callable[[int], Rounds], judge: Callable[[Rounds], Sequence[Target]],
                  rounds: int, most: int) -> Rounds:
    """``measure(rounds)``'s per-round lists, extended by further batches while a target is
    inconclusive with a settle estimate (never one whose median sits at its bound), up to
    ``most`` rounds in all.

    Why: a target whose median is a few percent off its bound is decided in one run and not in
    the next (three runs of 9 rounds flipped four of 26 verdicts); the rounds that settle it cost
    only where they are needed. Adding rounds after a look widens the chance of a wrong decision
    a little (a sequential test); the cap bounds it, and every round is kept and recorded."""
    got = measure(rounds)
    while (n := len(next(iter(got.values())))) < most:
        need = [r["settle"] for r in (t.check() for t in judge(got))
                if r["verdict"] == "inconclusive here" and r["settle"] is not None]
        if not need:
            break
        more = measure(min(max(need), most) - n)
        got = {k: v + more[k] for k, v in got.items()}
    return got


def show(targets: Sequence[Target]) -> list[dict]:
    """Print each target's verdict line; the rows ``keep`` writes."""
    rows = [t.check() for t in targets]
    for r in rows:
        print(f"  {r['name']}: {r['line']}")
    return rows


# What a run writes itself: a run that appends to results.jsonl is not a run of a dirty tree.
OWN_FILES = ("gpu_runs", "benchmarks/results.jsonl")


def keep(bench: str, rows: list[dict], argv: Sequence[str] | None = None) -> None:
    """Append this run (machine, commit, every target's rows) to ``results.jsonl``, unless
    ``$PPDIT_BENCH_RECORD`` is 0 (``bench_compare``'s runs are compared, not recorded)."""
    if os.environ.get("PPDIT_BENCH_RECORD", "1") == "0":
        return
    line = {"bench": bench, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "argv": list(sys.argv[1:] if argv is None else argv),
            "commit": git_state(ROOT, exclude=OWN_FILES),
            "machine": machine(), "targets": [{k: v for k, v in r.items() if k != "line"}
                                              for r in rows]}
    with RESULTS.open("a") as f:
        f.write(json.dumps(line) + "\n")


def machine() -> dict:
    """What the numbers depend on: the CPU, its cores, the threads per rank, the libraries."""
    cpu = next((ln.split(":", 1)[1].strip() for ln in _cpuinfo() if ln.startswith("model name")),
               platform.processor() or None)
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "system": platform.system()}


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []
