"""Checker for lab 01: run it with ``pytest labs/lab01_split_steps``."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent


def _brute_force(weights, stages):
    n = len(weights)
    return min(max(sum(weights[a:b]) for a, b in itertools.pairwise((0, *cuts, n)))
               for cuts in itertools.combinations(range(1, n), stages - 1))


def check(impl, pool=None) -> None:
    """Raise (AssertionError / NotImplementedError) unless ``impl.split_steps`` is right.
    ``pool``: live ranks to reuse (the test suite's); a student's run starts fresh ones.
    ppdit's own splitter is the answer key here, so the file may not use it (own work)."""
    from ppdit.teaching.labkit import check_own_work

    check_own_work(impl, "lab 01")
    split = impl.split_steps
    for steps, stages in [(28, 2), (7, 3), (10, 4), (5, 5), (28, 7), (1, 1)]:
        ranges = split(steps, stages)
        assert [i for r in ranges for i in r] == list(range(steps)), "must cover every step once"
        sizes = [len(r) for r in ranges]
        assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1, f"uneven: {sizes}"
        assert sizes == sorted(sizes, reverse=True), f"earlier stages take extras: {sizes}"
    for weights, stages in [([2, 2, 2, 1, 1, 1, 1, 1], 2), ([5, 1, 1, 1, 1, 1], 3),
                            ([1, 3, 1, 3, 1, 3, 1], 4), ([1.5] * 9, 4)]:
        ranges = split(len(weights), stages, weights)
        assert [i for r in ranges for i in r] == list(range(len(weights)))
        worst = max(sum(weights[i] for i in r) for r in ranges)
        assert worst == pytest.approx(_brute_force(weights, stages)), f"not optimal: {ranges}"
    with pytest.raises(ValueError, match=r"3.*4"):
        split(3, 4)
    _check_hidden(split)
    _run_pipeline(split, pool)


def _check_hidden(split) -> None:
    """Cases drawn at every run, in no list a learner could fit."""
    from ppdit.teaching.labkit import hidden_cases

    with hidden_cases() as rng:
        for _ in range(30):
            steps = rng.randint(1, 40)
            stages = rng.randint(1, steps)
            sizes = [len(r) for r in split(steps, stages)]
            assert sum(sizes) == steps and max(sizes) - min(sizes) <= 1, (
                f"hidden case {steps} steps over {stages} stages: sizes {sizes}")
            weights = [rng.randint(1, 5) for _ in range(rng.randint(2, 12))]
            stages = rng.randint(1, min(len(weights), 5))
            ranges = split(len(weights), stages, weights)
            worst = max(sum(weights[i] for i in r) for r in ranges)
            best = _brute_force(weights, stages)
            assert [i for r in ranges for i in r] == list(range(len(weights))) and worst == best, (
                f"hidden case weights {weights} over {stages} stages: your split {ranges} costs "
                f"{worst} on its slowest stage, the best {best}")


def _run_pipeline(split, pool=None) -> None:
    """Your split drives a real 2-stage pipeline; the result must equal one device."""
    from ppdit.model import build_model
    from ppdit.parallel.step_split.plan import StepSplitPlan
    from ppdit.parallel.step_split.run import run_step_split
    from ppdit.sampler import Request, SamplingConfig, generate

    sampling = SamplingConfig(num_steps=5)
    requests = (Request(0, 3), Request(1, 4))
    plan = StepSplitPlan(requests, tuple(split(5, 2)), sampling)
    result = run_step_split(plan, echo=False, timeout_s=120, pool=pool)
    from ppdit.teaching.labkit import one_thread

    model = build_model("tiny", seed=0)
    with one_thread():
        for r in requests:
            assert torch.equal(result.latents[r.request_id],
                               generate(model, r, sampling=sampling))


def test_lab01():
    from ppdit.teaching.labkit import lab_implementation

    check(lab_implementation(HERE / "lab01_split_steps.py"))
