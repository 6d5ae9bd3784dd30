"""The launcher: results come back, failures surface fast and named, nothing is left running."""

from __future__ import annotations

import time

import pytest

from ppdit.runtime import LaunchTimeout, RankError, launch
from ppdit.runtime.processes.hello import hello
from ppdit.teaching import demos
from tests.support import workers


def test_results_output_and_events_of_one_launch(capsys, no_orphans):
    # one fresh launch checks three things a launch must do (each launch costs seconds):
    # results in rank order, each rank's output echoed with its prefix, events to the caller
    seen = []
    out = launch(workers.hello_echo_and_emit, 2, timeout_s=120,
                 on_event=lambda r, e: seen.append((r, e)))
    assert [o["rank"] for o in out] == [0, 1]
    assert all(o["backend"] == "gloo" and o["device"] == "cpu" for o in out)
    assert all(o["all_reduce_sum"] == 3.0 for o in out)  # 1 + 2
    assert out[0]["pid"] != out[1]["pid"]
    printed = capsys.readouterr().out
    assert "[rank 0] hello from rank 0" in printed and "[rank 1] hello from rank 1" in printed
    assert sorted(seen) == [(r, ("tick", i)) for r in (0, 1) for i in range(3)]


def test_world_of_one_and_calling_twice(no_orphans):
    assert launch(hello, 1, timeout_s=120)[0]["world_size"] == 1
    assert launch(hello, 1, timeout_s=120)[0]["threads"] >= 1


def test_a_rank_that_raises_is_named_with_its_traceback(no_orphans):
    start = time.monotonic()
    with pytest.raises(RankError) as info:
        launch(demos.raise_on, 2, args=(1, "the model exploded"), timeout_s=120)
    assert time.monotonic() - start < 30
    assert info.value.rank == 1
    assert "ValueError: the model exploded" in str(info.value)
    assert "demos.py" in str(info.value)  # the traceback, not just the message


def test_a_killed_rank_is_named_as_the_cause(no_orphans):
    start = time.monotonic()
    with pytest.raises(RankError) as info:
        launch(workers.die_on, 2, args=(1,), timeout_s=120)
    assert time.monotonic() - start < 30
    assert info.value.rank == 1
    assert "SIGKILL" in str(info.value)


def test_a_receive_that_never_comes_times_out(no_orphans):
    start = time.monotonic()
    with pytest.raises(RankError) as info:
        launch(workers.recv_never, 2, args=(2.0,), timeout_s=120)
    assert time.monotonic() - start < 30
    assert info.value.rank == 1
    assert "TimeoutError" in str(info.value) and "from rank 0" in str(info.value)


def test_a_hang_ends_at_the_launch_timeout(no_orphans):
    start = time.monotonic()
    with pytest.raises(LaunchTimeout, match=r"ranks \[0, 1\] did not finish within 8 s"):
        launch(workers.sleep_forever, 2, timeout_s=8)
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("world_size", [0, -1, 1.5])
def test_bad_world_size(world_size):
    with pytest.raises(ValueError, match=r"world_size=.* must be an integer >= 1"):
        launch(hello, world_size)


def test_bad_backend():
    with pytest.raises(ValueError, match="backend='mpi' is not one of"):
        launch(hello, 1, backend="mpi")


def test_a_live_pool_runs_a_worker_imported_by_path_after_it_started(pools, tmp_path):
    """A lab's checker imports itself by path (``labkit.load_module``) after the suite's pool
    started: the job carries the caller's import path, so the live ranks unpickle its worker."""
    from ppdit.teaching.labkit import load_module

    pool = pools(2)
    launch(hello, 2, pool=pool)  # the ranks are up before the module exists
    (tmp_path / "late_worker_mod.py").write_text("def worker(ctx):\n    return ctx.rank * 10\n")
    module = load_module(tmp_path / "late_worker_mod.py")
    assert launch(module.worker, 2, pool=pool) == [0, 10]


def test_bounds_follow_the_work_the_ranks_measured(no_orphans):
    """A job whose bounds follow its work: 8 s for the job and every wait until the ranks say
    their work needs 40 s; rank 0 then computes 12 s while rank 1 waits in an all-reduce.
    Both the caller's deadline and the group's timeout moved, so it ends well. (And on NCCL a
    failed operation would raise in the rank, not tear it down: the watchdog's setting.)"""
    out = launch(workers.longer_than_the_bounds, 2, args=(40.0, 12.0), timeout_s=8,
                 pg_timeout_s=8, follow_work=True, echo=False)
    assert out == [{"bound_s": 40.0, "watchdog": "2"}] * 2


def test_every_group_takes_the_launchs_timeout(no_orphans):
    """torch gives a new group its own default timeout (NCCL 10 min, gloo 30): the mesh's
    groups take the world's, so one bound holds for every wait."""
    assert launch(workers.group_timeouts, 2, pg_timeout_s=77, echo=False) == [[77.0, 77.0]] * 2
