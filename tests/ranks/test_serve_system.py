"""The controller + mesh system on real ranks: equality with one device, hard cuts, queues,
duplicates, and every fault ending in a clear error within bounded time, no orphans."""

from __future__ import annotations

import time

import pytest
import torch

from ppdit.runtime import RankError
from ppdit.serve.config import BringupConfig, Faults
from ppdit.serve.system import reference_stream, run_bringup

# TP in the mesh sums partial products in another order than one device (the all-reduce).
PP1_TOL = {"rtol": 1e-4, "atol": 1e-5}
QUICK = {"num_steps": 2, "timeout_s": 20.0}


def _delivered(res):
    return [(d.epoch, d.video, d.chunk_index) for d in res.controller.delivered]


@pytest.mark.parametrize("phase", ["pp0", "recompute"])
def test_stream_equals_one_device_bitwise(phase, pools):
    cfg = BringupConfig(phase=phase, chunks=3, **QUICK)
    res = run_bringup(cfg, echo=False, pool=pools(2))
    ref = reference_stream(cfg)
    assert _delivered(res) == [(0, 0, i) for i in range(3)]
    for key, latent in res.controller.latents.items():
        assert torch.equal(latent, ref[key]), key
    frames = [d.frames for d in res.controller.delivered]
    assert frames == [1 + 4 * (cfg.chunk_frames - 1)] + [4 * cfg.chunk_frames] * 2


def test_hard_cut_drops_results_in_flight_and_resets(pools):
    cfg = BringupConfig(phase="overlap", chunks=5, cut_at=3, in_flight=2, **QUICK)
    res = run_bringup(cfg, echo=False, pool=pools(2))
    got = _delivered(res)
    cut = next(i for i, (epoch, _, _) in enumerate(got) if epoch == 1)
    assert all(epoch == 0 for epoch, _, _ in got[:cut])
    assert all(epoch == 1 for epoch, _, _ in got[cut:]), "old epoch delivered after the cut"
    assert [c for _, v, c in got[cut:]] == [0, 1] and res.controller.dropped_stale >= 1
    assert len(got) + res.controller.dropped_stale == 5
    ref = reference_stream(cfg)
    for key, latent in res.controller.latents.items():
        assert torch.equal(latent, ref[key]), key
    # the new video restarted its decoder: its first chunk again opens with 1 pixel frame
    assert res.controller.delivered[cut].frames == 1 + 4 * (cfg.chunk_frames - 1)


def test_duplicate_envelope_yields_one_result(pools):
    cfg = BringupConfig(phase="pp0", chunks=3, faults=Faults(duplicate_at=1), **QUICK)
    res = run_bringup(cfg, echo=False, pool=pools(2))
    assert _delivered(res) == [(0, 0, 0), (0, 0, 1), (0, 0, 2)]
    assert res.mesh[0].duplicates == 1 and res.mesh[0].generated == 3


def test_slow_consumer_backpressure_bounds_the_queue_and_loses_nothing(pools):
    cfg = BringupConfig(phase="overlap", chunks=6, d_out_capacity=2, consumer_delay_s=0.3,
                        decode=False, **QUICK)
    res = run_bringup(cfg, echo=False, pool=pools(2))
    assert _delivered(res) == [(0, 0, i) for i in range(6)]
    assert res.controller.max_depth["D_OUT"] <= 2
    assert res.controller.producer_blocked_s > 0.1


def test_pp1_tensor_parallel_mesh_matches_one_device(pools):
    cfg = BringupConfig(phase="pp1", tp=2, chunks=3, **QUICK)
    res = run_bringup(cfg, echo=False, pool=pools(3))
    ref = reference_stream(cfg)
    assert _delivered(res) == [(0, 0, i) for i in range(3)]
    for key, latent in res.controller.latents.items():
        torch.testing.assert_close(latent, ref[key], **PP1_TOL)
    assert [m.generated for m in res.mesh] == [3, 3]  # every mesh rank ran every chunk


def _fails(cfg, **kw):
    start = time.monotonic()
    with pytest.raises(RankError) as info:
        run_bringup(cfg, echo=False, **kw)
    assert time.monotonic() - start < 30 + 15  # fault detected within the bound (+ start-up)
    return info.value


def test_wrong_envelope_version_is_named(no_orphans):
    err = _fails(BringupConfig(phase="pp0", chunks=3, faults=Faults(wrong_version_at=1),
                               decode=False, **QUICK))
    assert err.rank == 1
    assert "version 2 but this reader speaks version 1" in str(err)


def test_a_killed_mesh_rank_is_named(no_orphans):
    err = _fails(BringupConfig(phase="overlap", chunks=4, faults=Faults(kill_mesh_at=2),
                               decode=False, **QUICK))
    assert err.rank == 1 and "SIGKILL" in str(err)


def test_a_stopped_controller_ends_the_mesh(capsys, no_orphans):
    err = _fails(BringupConfig(phase="overlap", chunks=4,
                               faults=Faults(controller_crash_at=1), decode=False, **QUICK))
    assert err.rank == 0 and "controller crashed on purpose" in str(err)


def test_pp1_mesh_block_compiles_without_graph_breaks(pools):
    from ppdit.runtime import launch
    from ppdit.serve.pp1 import explain_mesh_block

    for view in launch(explain_mesh_block, 2, timeout_s=300, echo=False, pool=pools(2)):
        assert view["graph_breaks"] == 0 and view["graphs"] == 1, view["reasons"]
        assert view["all_reduces_in_graph"] == 7  # 2 out-projections, 4 q/k norms, 1 FFN
