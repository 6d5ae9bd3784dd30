"""NCCL's point-to-point rules on CPU ranks (``ppdit.runtime.comm.nccl_rules``).

The hangs the GPU path was predicted to have, reproduced with their pre-fix order (fixtures in
``tests/support/nccl_workers.py``), and passing in the order each layout uses now. A deadlock
must end within seconds with both queues named, not at a timeout.
"""

from __future__ import annotations

import time

import pytest

from ppdit.runtime.processes.launch import launch
from ppdit.runtime.processes.pool import RankError
from ppdit.teaching.hangs import relay
from tests.support import nccl_workers as w

LIMIT = 16 << 10  # the suite's eager limit (conftest): frames rendezvous, headers stay eager
QUICK = 20.0  # a deadlock is reported within this, far below every timeout involved


def _fails(worker, args, rules=LIMIT) -> str:
    start = time.monotonic()
    with pytest.raises(RankError) as err:
        launch(worker, 2, args=args, nccl_rules=rules, echo=False, timeout_s=60,
               threads_per_rank=1)
    assert time.monotonic() - start < QUICK, "the deadlock was not found quickly"
    return str(err.value)


def test_a_receive_posted_ahead_deadlocks_and_names_both_queues(no_orphans):
    text = _fails(w.crossed, (False,))
    assert "P2PDeadlock" in text
    assert "ranks 0 and 1" in text or "ranks 1 and 0" in text
    assert "rank 0's queues" in text and "rank 1's queues" in text
    assert "recv" in text and "queued" in text  # the send stuck behind the receive


def test_fused_pair_runs(pools):
    out = launch(w.crossed, 2, args=(True,), pool=pools(2))
    assert out == [[1.0] * 4, [0.0] * 4]


def test_large_sends_both_first_deadlock_small_ones_pass(pools, no_orphans):
    small = launch(w.both_send_first, 2, args=(16,), pool=pools(2))
    assert small == [1.0, 0.0]  # eager: copied into the peer's buffer
    text = _fails(w.both_send_first, (LIMIT,))  # 64 KiB each: rendezvous
    assert "rendezvous" in text and "P2PDeadlock" in text


def test_a_receive_times_out_from_its_posting(no_orphans):
    text = _fails(w.late_wait, (1.0, 0.5))
    assert "TimeoutError" in text and "within 0.5 s of its posting" in text


def test_after_a_timeout_ranks_skip_the_closing_barrier_and_the_pool_restarts(pools):
    pool = pools(2)
    assert launch(w.both_give_up, 2, pool=pool) == ["gave up", "gave up"]
    assert not pool.started  # its ranks' communicators were aborted: the next job restarts
    assert launch(w.crossed, 2, args=(True,), pool=pool) == [[1.0] * 4, [0.0] * 4]


def test_step_split_credits_on_the_frames_communicator_deadlock(no_orphans):
    text = _fails(relay, (5, 1, False))  # max_in_flight 2 hangs the same way (lesson 01 §6)
    assert "P2PDeadlock" in text


@pytest.mark.parametrize("max_in_flight", [1, 2])
def test_credits_on_their_own_communicator_pass(pools, max_in_flight):
    assert launch(relay, 2, args=(5, max_in_flight, True),
                  pool=pools(2)) == [list(range(5))] * 2


def test_layer_split_p2_on_one_communicator_deadlocks(no_orphans):
    assert "P2PDeadlock" in _fails(w.layer_split_fixture, (1, False))


@pytest.mark.parametrize("micro", [1, 2, 3])
def test_layer_split_p2_on_lanes_passes(pools, micro):
    out = launch(w.layer_split_fixture, 2, args=(micro, True), pool=pools(2))
    assert out[0] == {} and sorted(out[1]) == list(range(micro))


def test_serving_overlap_on_one_communicator_deadlocks(no_orphans):
    assert "P2PDeadlock" in _fails(w.serve_fixture, (False,))


def test_serving_overlap_on_lanes_passes(pools):
    assert launch(w.serve_fixture, 2, args=(True,), pool=pools(2)) == ["controller", "mesh"]


def test_a_slow_peer_is_not_a_deadlock(pools):
    assert launch(w.slow_reply, 2, pool=pools(2)) == [2.0, 1.0]
