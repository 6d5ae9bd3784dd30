"""Every lab's checker must fail on the stub, pass on the reference solution, and catch the
mistake its handout is about (the broken variants in ``tests/support/lab_variants``)."""

from __future__ import annotations

import pytest

from ppdit.teaching.labkit import load_module
from tests.conftest import ROOT

LABS = ROOT / "labs"
VARIANTS = ROOT / "tests" / "support" / "lab_variants"
CASES = [("lab01_split_steps", "check_lab01"), ("lab02_handoff", "check_lab02"),
         ("lab03_bubble", "check_lab03"), ("lab04_tp_linear", "check_lab04"),
         ("lab05_ulysses", "check_lab05"), ("lab06_hang", "check_lab06"),
         ("lab07_filling", "check_lab07"), ("lab08_graph_step", "check_lab08"),
         ("lab09_envelope", "check_lab09")]
CHECKERS = dict(CASES)
# Labs whose checkers run on the suite's live ranks. Lab 06 starts its own: NCCL's rules and
# their eager limit are fixed when a rank starts, and its checker needs them strict.
RANKS = {"lab01_split_steps": 2, "lab02_handoff": 2, "lab04_tp_linear": 2, "lab05_ulysses": 3}
# (lab, broken variant, what the checker must say about it)
BROKEN = [
    ("lab01_split_steps", "lab01_imports_ppdit", "lab 01 asks for your own work"),
    ("lab02_handoff", "lab02_trusts_its_plan", "wrong-step bug not caught"),
    ("lab02_handoff", "lab02_restarts_at_zero", "differs from one device"),
    ("lab02_handoff", "lab02_vague_refusal", "does not name both steps"),
    ("lab03_bubble", "lab03_latency_free_makespan", "your makespan"),
    ("lab03_bubble", "lab03_calls_ppdit_simulate", "may not use ppdit's own code"),
    ("lab03_bubble", "lab03_makespan_from_schedule", "must be a closed form"),
    # the dishonest answers of the lessons review (issue 52): a clock behind a size guard, ...
    ("lab03_bubble", "lab03_private_clock_size_guard", r"makespan\(.*more than 1000 lines"),
    ("lab03_bubble", "lab03_size_guard", r"probe P=.*your makespan 0\.0"),
    ("lab03_bubble", "lab03_fewest_by_search", r"fewest_micro_batches\(.*more than 1000 lines"),
    # ... and ppdit's simulator reached past the import scan: by a computed name, or unseen
    ("lab03_bubble", "lab03_importlib_simulate", r"uses importlib .*lab 03 asks for your own"),
    ("lab03_bubble", "lab03_sys_modules_simulate", r"uses modules \(`sys\.modules`\).*own work"),
    ("lab03_bubble", "lab03_unpickles_simulate", r"your schedule ran ppdit\..*own work"),
    ("lab04_tp_linear", "lab04_inplace_allreduce", "reduces in place"),
    ("lab04_tp_linear", "lab04_async_allreduce", "graph break"),
    ("lab05_ulysses", "lab05_no_permute", "not the right numbers"),
    ("lab05_ulysses", "lab05_allgather_then_slice", "bytes"),
    ("lab05_ulysses", "lab05_wraps_ppdit_comms", r"uses ppdit\.parallel\.sequence.*own work"),
    ("lab05_ulysses", "lab05_unpickles_ppdit_comms",
     r"your seq_to_heads ran ppdit\.parallel.*own work"),
    ("lab06_hang", "lab06_acks_on_frames_comm", "hangs under NCCL's rules"),
    ("lab06_hang", "lab06_no_flow_control", "window"),
    ("lab06_hang", "lab06_receives_on_demand", "must be posted ahead"),
    ("lab06_hang", "lab06_outside_the_rules", "outside NCCL's rules"),
    ("lab07_filling", "lab07_hop_free_makespan", "with hops your makespan"),
    ("lab07_filling", "lab07_blocking_send", "once full"),
    ("lab07_filling", "lab07_speedup_as_throughput", "your throughput"),
    ("lab07_filling", "lab07_makespan_as_latency", "Little's law on the simulated trace"),
    ("lab07_filling", "lab07_requests_rounded_down", "reaches only"),
    ("lab07_filling", "lab07_requests_naive_ceil", "already reaches"),
    ("lab07_filling", "lab07_event_simulator", "replays a clock"),
    ("lab07_filling", "lab07_imports_the_checker", "may not use ppdit's own code or the checker"),
    ("lab07_filling", "lab07_replay_size_guard",
     r"probe R=\d+.*your makespan is 0 s|makespan\(1000, .*more than 1000 lines"),
    ("lab07_filling", "lab07_requests_guard", r"fraction=0\.99\d*, P=\d+: with R=1 .*reaches only"),
    ("lab07_filling", "lab07_dunder_import_checker", r"uses __import__ .*lab 07 asks for your own"),
    ("lab07_filling", "lab07_exec_checker", r"uses exec .*lab 07 asks for your own work"),
    ("lab08_graph_step", "lab08_item_index", r"host sync.*int\(bufs\.step\)"),
    ("lab08_graph_step", "lab08_zero_d_index", r"host sync.*timesteps\[bufs\.step\]"),
    ("lab08_graph_step", "lab08_fresh_output", "returned a new tensor"),
    ("lab08_graph_step", "lab08_last_step_shortcut", "other operators than step 0"),
    ("lab08_graph_step", "lab08_counts_in_python", "frozen at their recorded value"),
    ("lab09_envelope", "lab09_no_version_check", "version rule missing"),
    ("lab09_envelope", "lab09_shape_not_dtype", "dtype rule missing"),
    ("lab09_envelope", "lab09_four_dims", "round trip changed shape"),
    ("lab09_envelope", "lab09_accepts_a_gap", "skipped chunk"),
    ("lab09_envelope", "lab09_reads_reserved_slot", "reserved slot"),
    ("lab09_envelope", "lab09_own_layout", "ppdit's decode"),
]


def _checker(lab: str, pools):
    """The lab's ``check``, on the suite's live ranks where it launches any (a failing run
    restarts its pool: the stubs and the broken variants pay a fresh start, the rest do not)."""
    check = load_module(LABS / lab / f"{CHECKERS[lab]}.py").check
    if lab not in RANKS:
        return check
    return lambda impl: check(impl, pool=pools(RANKS[lab]))


@pytest.mark.parametrize("lab,checker", CASES)
def test_checker_rejects_the_stub(lab, checker, pools, no_orphans):
    with pytest.raises(NotImplementedError):
        _checker(lab, pools)(load_module(LABS / lab / f"{lab}.py"))


@pytest.mark.parametrize("lab,checker", CASES)
def test_checker_accepts_the_solution(lab, checker, pools, no_orphans):
    _checker(lab, pools)(load_module(LABS / "solutions" / f"{lab}_solution.py"))


@pytest.mark.parametrize("lab,variant,message", BROKEN)
def test_checker_catches_the_mistake_its_lab_is_about(lab, variant, message, pools,
                                                       no_orphans):
    with pytest.raises(Exception, match=message) as caught:
        _checker(lab, pools)(load_module(VARIANTS / f"{variant}.py"))
    assert not isinstance(caught.value, NotImplementedError)


@pytest.mark.parametrize("lab", [lab for lab, _ in CASES])
def test_stub_marks_the_student_region(lab):
    text = (LABS / lab / f"{lab}.py").read_text()
    assert text.count("# BEGIN YOUR SOLUTION") == text.count("# END YOUR SOLUTION") >= 1
    assert (LABS / lab / "README.md").exists()


def test_every_lab_is_in_the_book_and_the_index():
    toc = (LABS.parent / "book" / "_toc.yml").read_text()
    index = (LABS / "README.md").read_text()
    for lab, _ in CASES:
        assert f"labs/{lab}/README" in toc, f"{lab} is missing from book/_toc.yml"
        assert f"({lab}/README.md)" in index, f"{lab} is missing from labs/README.md"


def test_hidden_cases_name_their_seed_and_replay(monkeypatch):
    """A failure on a drawn case says which seed drew it, and that seed draws the same again."""
    from ppdit.teaching.labkit import hidden_cases

    monkeypatch.setenv("PPDIT_LAB_SEED", "1234")
    with pytest.raises(AssertionError) as caught, hidden_cases() as rng:
        first = rng.random()
        raise AssertionError("a wrong answer")
    assert any("PPDIT_LAB_SEED=1234" in note for note in caught.value.__notes__)
    with hidden_cases() as rng:
        assert rng.random() == first
