"""Every lab's checker must fail on the stub and pass on the reference solution."""

from __future__ import annotations

from pathlib import Path

import pytest

from ppdit.teaching.labkit import load_module

LABS = Path(__file__).resolve().parents[1] / "labs"
CASES = [("lab01_split_steps", "check_lab01"), ("lab02_handoff", "check_lab02"),
         ("lab03_bubble", "check_lab03"), ("lab04_tp_linear", "check_lab04")]


@pytest.mark.parametrize("lab,checker", CASES)
def test_checker_rejects_the_stub(lab, checker, no_orphans):
    check = load_module(LABS / lab / f"{checker}.py").check
    with pytest.raises(NotImplementedError):
        check(load_module(LABS / lab / f"{lab}.py"))


@pytest.mark.parametrize("lab,checker", CASES)
def test_checker_accepts_the_solution(lab, checker, no_orphans):
    check = load_module(LABS / lab / f"{checker}.py").check
    check(load_module(LABS / "solutions" / f"{lab}_solution.py"))


@pytest.mark.parametrize("lab", [lab for lab, _ in CASES])
def test_stub_marks_the_student_region(lab):
    text = (LABS / lab / f"{lab}.py").read_text()
    assert text.count("# BEGIN YOUR SOLUTION") == text.count("# END YOUR SOLUTION") >= 1
    assert (LABS / lab / "README.md").exists()
