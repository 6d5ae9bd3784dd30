"""One timing rule (``ppdit.runtime.observe.timing``): every timed region goes through ``timed``.

A Python clock around GPU work measures the launch of its kernels, not the kernels; the helper
synchronises through the rank's ``Placement`` and reads CUDA events. The walk below keeps the
rule: a module of ``ppdit`` that reads ``perf_counter`` or ``time.time`` itself must be in
``CLOCK_ALLOWED``, with the reason its clock times no device work.
"""

from __future__ import annotations

import ast
import time
from functools import partial

import pytest
import torch

from ppdit.runtime.device import Placement
from ppdit.runtime.observe.timing import MIN_ROUNDS, repeat, timed
from ppdit.sampler import SamplingConfig, measure_step_costs
from tests.conftest import ROOT

PACKAGE = ROOT / "ppdit"
CLOCKS = {"perf_counter", "perf_counter_ns", "time"}  # functions of the ``time`` module

# Modules allowed to read those clocks themselves, and why none of them times device work.
CLOCK_ALLOWED = {
    "runtime/observe/timing.py": "the helper itself: the CPU clock of `timed`, and `now_ns`",
    "runtime/observe/trace.py": "span and counter timestamps on the host-wide clock; GPU spans are "
                        "resolved with CUDA events against a synchronised reference",
    "runtime/processes/rank.py": "boot-phase timestamps of a rank (entry, setup, group, dispatch)",
    "runtime/processes/pool.py": "the parent's side of the boot timestamps (spawn, submit)",
    "runtime/comm/nccl_rules.py": "time.time() stamps a stalled rank's queue in the store, so its "
                             "peer can tell a fresh record from an old one: no measurement",
    "sampler.py": "the CPU default timer of measure_step_costs (L0 cannot import the runtime's "
                  "helper): it refuses a model off the CPU, whose callers pass `timed`",
    "jobs.py": "a whole generate job's wall time (launch, load, write), read once the video "
               "is back on the host",
    "gpu_check/sections.py": "a report section's wall time, its measurements timed inside",
    "gpu_check/suite.py": "the wall time of the GPU test suite, a subprocess",
    "gpu_check/run.py": "the whole check's wall time, for the report's provenance",
    "toy/run.py": "training stages' wall time; the toy trains on the CPU and reads every "
                  "step's loss",
    "toy/run_dit.py": "training stages' wall time; the toy trains on the CPU and reads every "
                      "step's loss",
}


def clock_reads(source: str) -> list[tuple[int, str]]:
    """(line, expression) of every use of ``time.perf_counter``, ``time.perf_counter_ns`` or
    ``time.time`` in ``source``, however imported (``import time as t``, ``from time import
    perf_counter as pc``); uses without a call (``default_factory=time.time``) count too."""
    tree = ast.parse(source)
    modules, names = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "time"}
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            names |= {a.asname or a.name: a.name for a in node.names if a.name in CLOCKS}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in CLOCKS
                and isinstance(node.value, ast.Name) and node.value.id in modules):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
        elif isinstance(node, ast.Name) and node.id in names:
            found.append((node.lineno, node.id))
    return sorted(found)


def package_clock_reads() -> dict[str, list[tuple[int, str]]]:
    """Every module of ``ppdit`` that reads a clock: path (relative to the package) -> reads."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        reads = clock_reads(path.read_text())
        if reads:
            out[path.relative_to(PACKAGE).as_posix()] = reads
    return out


def test_no_clock_around_device_work_outside_the_helper():
    offenders = [f"ppdit/{module}:{line}: {expr}"
                 for module, reads in package_clock_reads().items() if module not in CLOCK_ALLOWED
                 for line, expr in reads]
    assert not offenders, (
        "clocks read outside runtime.observe.timing (time device work with `timed(placement)` or "
        "`repeat`, stamp events with `now_ns()`, or add the module to CLOCK_ALLOWED with the "
        "reason its clock times no device work):\n  " + "\n  ".join(offenders))


def test_the_allowlist_has_no_stale_entries():
    stale = sorted(set(CLOCK_ALLOWED) - set(package_clock_reads()))
    assert not stale, f"these modules read no clock any more; drop them from CLOCK_ALLOWED: {stale}"


def test_the_walk_finds_every_spelling():
    source = ("import time\nimport time as t\nfrom time import perf_counter as pc, sleep\n"
              "a = time.perf_counter()\nb = t.time()\nc = pc()\nd = time.perf_counter_ns\n"
              "e = time.monotonic()\nsleep(0)\n")
    assert clock_reads(source) == [(4, "time.perf_counter"), (5, "t.time"), (6, "pc"),
                                   (7, "time.perf_counter_ns")]


# -- the helper on the CPU -----------------------------------------------------------------------


def test_timed_measures_the_body_on_the_cpu():
    with timed() as t:
        time.sleep(0.05)
    assert t.seconds >= 0.05 and t.how == "cpu clock"
    with timed(Placement(torch.device("cpu"), "gloo")) as t:  # a CPU placement: the same clock
        time.sleep(0.01)
    assert t.seconds >= 0.01 and t.how == "cpu clock"


def test_lap_reads_the_time_so_far():
    with timed() as t:
        time.sleep(0.02)
        first = t.lap()
        time.sleep(0.02)
    assert 0.02 <= first <= t.seconds and t.seconds >= 0.04
    with pytest.raises(RuntimeError, match="body of a `timed` region"):
        t.__class__().lap()


def test_repeat_warms_up_then_times_each_round():
    calls = []
    runs = repeat(lambda: calls.append(1), rounds=4, warmup=2)
    assert len(calls) == 6 and len(runs.seconds) == 4
    assert runs.spread[0] <= runs.median <= runs.spread[1]


@pytest.mark.parametrize("rounds", [0, 1, 2])
def test_repeat_refuses_fewer_than_three_rounds(rounds):
    assert MIN_ROUNDS == 3
    with pytest.raises(ValueError, match="at least 3 timed rounds"):
        repeat(lambda: None, rounds=rounds)


def test_step_costs_take_the_runtime_timer_and_refuse_a_gpu_model_without_one(tiny):
    sampling = SamplingConfig(num_steps=2)
    shape = (1, 16, 1, 8, 8)
    by_default = measure_step_costs(tiny, "tiny", sampling, shape, repeats=1)
    through_timed = measure_step_costs(tiny, "tiny", sampling, shape, repeats=1,
                                       timer=partial(timed, None))
    assert len(by_default) == len(through_timed) == 2
    assert all(s > 0 for s in by_default + through_timed)
    off_cpu = torch.nn.Linear(2, 2, device="meta")  # any device but the CPU: no clock is right
    with pytest.raises(ValueError, match="pass timer=partial"):
        measure_step_costs(off_cpu, "tiny", sampling)


# -- on a GPU -------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_timed_on_cuda_counts_the_kernels_not_their_launch():
    placement = Placement(torch.device("cuda", 0), "nccl")
    a = torch.randn(8192, 8192, device=placement.device, dtype=torch.bfloat16)
    out = torch.empty_like(a)

    def matmuls():
        for _ in range(10):  # 11 TFLOP: milliseconds of tensor cores, microseconds to launch
            torch.mm(a, a, out=out)

    matmuls()
    placement.synchronize()
    start = time.perf_counter()
    matmuls()
    launched = time.perf_counter() - start  # what a bare clock would have reported
    with timed(placement) as t:
        matmuls()
        half = t.lap()
    assert t.how == "cuda events"
    assert t.seconds > 3 * launched, (t.seconds, launched)
    assert 0 < half <= t.seconds
    flops = 10 * 2 * 8192**3 / t.seconds
    assert 1e13 < flops < 5e15, f"{flops:.3g} FLOP/s is no GPU's rate: events misread"


def test_timed_also_counts_the_host_work_of_the_region():
    """``cpu_seconds``: the calling thread's CPU time, what a message costs the host; a wait
    costs none of it, while wall time counts it all."""
    with timed() as waiting:
        time.sleep(0.05)
    with timed() as working:
        sum(i * i for i in range(200_000))
    assert waiting.seconds >= 0.05 and waiting.cpu_seconds < 0.01
    assert 0 < working.cpu_seconds <= working.seconds + 0.01
