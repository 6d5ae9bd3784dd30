"""Checker for lab 02: run it with ``pytest labs/lab02_handoff``.

Three parts, cheapest first:

1. your stages, run one after another in this process over a loopback wire
   (``ppdit.teaching.labkit.run_ranks_in_order``), on 3 stages (2+2+1 steps): bit for bit
   against one device;
2. the bug this lab is about: rank 1 is handed a plan that disagrees with rank 0's by one step
   (it believes its stage starts at step 2, or 4, while rank 0 ran steps 0..2 and hands over
   the latent *before step 3*). Your receiving stage must refuse with an error that names both
   steps, instead of running its steps on a latent from another point of the noise schedule;
3. your worker on 2 real gloo ranks, bit for bit against one device.

Beside part 1's split, a split and requests drawn at each run (``_check_hidden``): hidden
cases, which no list holds.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

HERE = Path(__file__).parent
NUM_STEPS = 5


def _reference(requests, sampling):
    from ppdit.model import build_model
    from ppdit.sampler import generate

    model = build_model("tiny", seed=0)
    return {r.request_id: generate(model, r, sampling=sampling) for r in requests}


def _compare(results, expected, where: str) -> None:
    final = results[-1]
    assert all(r == {} for r in results[:-1]), f"{where}: only the last stage returns latents"
    assert sorted(final) == sorted(expected), f"{where}: requests returned: {sorted(final)}"
    for rid, latent in final.items():
        assert torch.equal(latent, expected[rid]), (
            f"{where}: request {rid} differs from one device — did the receiving stage start "
            "at the step the sender stopped at, with the latent it sent?")


def _check_in_process(impl, sampling, requests, expected) -> None:
    from ppdit.parallel.step_split.plan import split_steps
    from ppdit.teaching.labkit import run_ranks_in_order

    stages = split_steps(NUM_STEPS, 3)
    results = run_ranks_in_order(impl.stage_worker, [(stages, sampling, requests)] * 3, [impl])
    _compare(results, expected, f"3 stages ({[len(s) for s in stages]} steps)")


def _check_hidden(impl, sampling) -> None:
    """A split and requests drawn at this run (hidden: no list of them to fit): 2 to 4 stages,
    cut anywhere, each request with its own seed."""
    from ppdit.sampler import Request
    from ppdit.teaching.labkit import hidden_cases, run_ranks_in_order

    with hidden_cases() as rng:
        n = rng.randint(2, 4)
        cuts = sorted(rng.sample(range(1, NUM_STEPS), n - 1))
        stages = [range(a, b) for a, b in zip((0, *cuts), (*cuts, NUM_STEPS), strict=True)]
        requests = [Request(i, rng.randrange(10_000)) for i in range(rng.randint(1, 3))]
        results = run_ranks_in_order(impl.stage_worker, [(stages, sampling, requests)] * n,
                                     [impl])
        _compare(results, _reference(requests, sampling),
                 f"hidden case: {n} stages of {[len(s) for s in stages]} steps, requests "
                 f"{requests}")


def _names_both_steps(text: str, arrived: int, believed: int) -> bool:
    """Whether a refusal says "step" and names both steps as numbers: a message that shows
    them both is one a person can act on (and one no unrelated error is likely to match)."""
    return "step" in text.lower() and all(re.search(rf"(?<!\d){n}(?!\d)", text)
                                          for n in (arrived, believed))


def _check_wrong_step_is_refused(impl, sampling, requests) -> None:
    """Rank 0 runs steps 0..2; rank 1 believes it starts at ``believed``: it must refuse."""
    from ppdit.teaching.labkit import run_ranks_in_order

    sent = [range(0, 3), range(3, NUM_STEPS)]  # rank 0's plan: it hands over before step 3
    requests = requests[:1]  # one is enough to see the refusal
    for believed in (2, 4):
        skewed = [range(0, believed), range(believed, NUM_STEPS)]  # rank 1's plan
        try:
            run_ranks_in_order(impl.stage_worker, [(sent, sampling, requests),
                                                   (skewed, sampling, requests)], [impl])
        except NotImplementedError:
            raise
        except Exception as err:  # any refusal by rank 1 counts, if it names both steps
            if "raised on rank 1 " not in " ".join(getattr(err, "__notes__", [])):
                raise AssertionError(f"with rank 1's plan one step off, rank 0 failed: "
                                     f"{type(err).__name__}: {err}") from err
            if not _names_both_steps(str(err), sent[1].start, believed):
                raise AssertionError(
                    f"rank 1 (believing its stage starts at step {believed}) failed, but its "
                    f"error does not name both steps, the one the latent arrived at (3) and the "
                    f"one its stage starts at ({believed}): {type(err).__name__}: {err}") from err
            continue
        raise AssertionError(
            f"wrong-step bug not caught: rank 0 handed over the latent before step 3, rank 1 "
            f"believed its stage starts at step {believed} and silently ran steps "
            f"{believed}..{NUM_STEPS - 1} on it. Send the step index with the latent and "
            "refuse a state that does not start where your stage starts.")


def _check_real_ranks(impl, sampling, requests, expected, pool=None) -> None:
    from ppdit.parallel.step_split.plan import split_steps
    from ppdit.teaching.labkit import run_on_ranks

    stages = split_steps(NUM_STEPS, 2)
    results = run_on_ranks(impl.stage_worker, 2, "lab 02", (stages, sampling, requests), pool)
    _compare(results, expected, "2 real ranks")


def check(impl, pool=None) -> None:
    """In-process pipelines, the wrong-step refusal, then 2 real gloo ranks (``pool``: live
    ranks to reuse, as the test suite does; a student's run starts fresh ones)."""
    from ppdit.sampler import Request, SamplingConfig
    from ppdit.teaching.labkit import one_thread

    sampling = SamplingConfig(num_steps=NUM_STEPS)
    requests = [Request(0, 5), Request(1, 6)]
    with one_thread():  # as the ranks run: threads_per_rank=1
        expected = _reference(requests, sampling)
        _check_in_process(impl, sampling, requests, expected)
        _check_hidden(impl, sampling)
        _check_wrong_step_is_refused(impl, sampling, requests)
    _check_real_ranks(impl, sampling, requests, expected, pool)


def test_lab02():
    from ppdit.teaching.labkit import lab_implementation

    check(lab_implementation(HERE / "lab02_handoff.py"))
