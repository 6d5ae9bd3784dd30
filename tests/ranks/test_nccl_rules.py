"""NCCL's point-to-point rules on CPU ranks (``ppdit.runtime.comm.nccl_rules``).

The hangs the GPU path was predicted to have, reproduced with their pre-fix order (fixtures in
``tests/support/nccl_workers.py``), and passing in the order each layout uses now. A deadlock
must end within seconds with both queues named, not at a timeout.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from ppdit.parallel.decode_overlap.plan import OverlapPlan
from ppdit.parallel.decode_overlap.ranks import OverlapRunner
from ppdit.parallel.layout import Layout
from ppdit.parallel.step_split.plan import make_plan
from ppdit.parallel.step_split.ranks import StepStageRunner
from ppdit.runtime.processes.launch import launch
from ppdit.runtime.processes.pool import RankError
from ppdit.runtime.rounds import Job, rounds_worker
from ppdit.sampler import SamplingConfig
from ppdit.teaching.hangs import relay
from tests.support import nccl_workers as w

LIMIT = 16 << 10  # an eager limit between a header (96 B) and a frame (64 KiB here)
QUICK = 20.0  # a deadlock is reported within this, far below every timeout involved


def _fails(worker, args, rules=LIMIT, ranks: int = 2) -> str:
    start = time.monotonic()
    with pytest.raises(RankError) as err:
        launch(worker, ranks, args=args, nccl_rules=rules, echo=False, timeout_s=60,
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
    small = launch(w.both_send_first, 2, args=(16,), nccl_rules=LIMIT, echo=False,
                   threads_per_rank=1)
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


# -- what NCCL does beyond one queue per pair: the device-wide sync, the group's stream for
# batches and collectives, a pair's set-up at its first operation, the watchdog ----------------

STRICT = 0  # the suite's own setting: every send waits for its receive


@pytest.mark.parametrize("how", w.SYNCS)
def test_a_device_wide_sync_waits_for_a_receive_posted_ahead(pools, no_orphans, how):
    """The explicit sync and the three CUDA makes by itself where ppdit causes them: each
    deadlocks with a receive posted ahead, and the message names it; a stream sync passes."""
    if how == "stream":
        assert launch(w.sync_with_a_receive_posted, 2, args=(how,), pool=pools(2)) == ["done"] * 2
        return
    text = _fails(w.sync_with_a_receive_posted, (how,), STRICT)
    named = {"device": "cudaDeviceSynchronize", "first launch": "first launch of NeverRunHere",
             "cudaFree": "cudaFree", "graph capture": "torch.cuda.graph"}[how]
    assert "P2PDeadlock" in text and "device-wide sync" in text and named in text


SERIAL = OverlapPlan(num_chunks=3, sampling=SamplingConfig(num_steps=2), max_ahead=0,
                     push_frames=1)


def test_decode_overlap_serial_warms_its_decoder_before_posting(no_orphans):
    """Cold ranks (a fresh launch): the decoder's first VAE launches, a device-wide sync under
    lazy loading, come before chunk 1's receive is posted. Without that warm-up the serial
    baseline deadlocks on its first chunk."""
    job = Job(OverlapRunner, (replace(SERIAL, warmup=False),), rounds=1)
    launch(rounds_worker, 2, args=(job,), nccl_rules=STRICT, echo=False, threads_per_rank=1)
    text = _fails(w.cold_decoder, (job,), STRICT)
    assert "P2PDeadlock" in text and "first launch of" in text


def test_decode_overlap_serial_traced_hangs_only_with_a_device_wide_sync(pools, no_orphans):
    """Lesson 09's serial baseline, traced: the decoder posts chunk 1's receive, then its first
    GPU span synchronises. The stream-level sync passes; the device-wide one, which timing and
    tracing used before, waits for chunk 1, which the generator sends only after chunk 0's
    credit (a hang on two GPUs, named here)."""
    job = Job(OverlapRunner, (SERIAL,), rounds=1)
    launch(rounds_worker, 2, args=(job,), pool=pools(2))
    assert "P2PDeadlock" in _fails(w.device_wide, (job,), STRICT)


def test_pp_tp_with_one_frame_in_flight_hangs_only_with_a_device_wide_sync(pools, no_orphans):
    """PP x TP, one frame in flight: a later stage posts the next frame's receive, and its
    first traced TP all-reduce synchronises (the same hang as decode overlap's)."""
    plan = make_plan(2, 2, stage=Layout(tp=2), sampling=SamplingConfig(num_steps=4),
                     max_in_flight=1)
    job = Job(StepStageRunner, (plan,), rounds=1)
    launch(rounds_worker, 4, args=(job,), pool=pools(4))
    assert "P2PDeadlock" in _fails(w.device_wide, (job,), STRICT, ranks=4)


@pytest.mark.parametrize("same_order", [True, False])
def test_a_batch_and_a_collective_share_the_groups_stream(pools, no_orphans, same_order):
    if same_order:
        assert launch(w.batch_then_collective, 2, args=(True,), pool=pools(2)) == [3.0, 2.0]
    else:
        text = _fails(w.batch_then_collective, (False,), STRICT)
        assert "P2PDeadlock" in text and "in a collective" in text


def test_batched_and_unbatched_ops_do_not_meet(no_orphans):
    text = _fails(w.batched_against_unbatched, (), STRICT)
    assert "P2PDeadlock" in text and "one side batched" in text


@pytest.mark.parametrize("warmed", [True, False])
def test_a_pairs_first_operation_blocks_until_the_peer_posts(pools, no_orphans, warmed):
    if warmed:
        assert launch(w.first_op_blocks, 2, args=(True,), pool=pools(2)) == ["done"] * 2
    else:
        text = _fails(w.first_op_blocks, (False,), STRICT)
        assert "P2PDeadlock" in text and "first operation blocks" in text


@pytest.mark.parametrize(("worker", "said"), [
    (w.wait_past_the_group, "the process group's timeout"),
    (w.timeout_raised_after_posting, "timeout when it was posted")])
def test_the_process_groups_timeout_bounds_every_wait(no_orphans, worker, said):
    """The watchdog: a wait that allows 20 s still ends at the group's 2 s, from the posting;
    and NCCL's work keeps the timeout in force when it was posted (``expect`` raises it
    later: the 60 s never reaches it)."""
    start = time.monotonic()
    with pytest.raises(RankError) as err:
        launch(worker, 2, nccl_rules=STRICT, echo=False, timeout_s=60, pg_timeout_s=2,
               threads_per_rank=1)
    assert time.monotonic() - start < QUICK
    assert said in str(err.value)
