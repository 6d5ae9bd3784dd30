"""Lesson 04's primitives on four live ranks: each one's result, reduce-scatter then all-gather
equal to all-reduce, and a fused receive-before-send exchange under NCCL's rules."""

from __future__ import annotations

import torch

from ppdit.teaching.collectives.primitives import (
    PRIMITIVES,
    SUM_ORDER_TOL,
    composition_worker,
    exchange_worker,
    expected_primitives,
    primitives_worker,
)


def test_the_primitives_on_four_ranks(pools):
    pool = pools(4)
    got = pool.run(primitives_worker)
    assert got == expected_primitives(4)
    assert list(got[0]) == list(PRIMITIVES)
    assert got[2]["all-to-all"] == ([30, 31, 32, 33], [12, 22, 32, 42])
    # reduce-scatter then all-gather is all-reduce: exactly on integers, to rounding on floats
    for integers in (True, False):
        out = pool.run(composition_worker, args=(64, integers))
        total = torch.stack([o["input"] for o in out]).sum(0)
        for o in out:
            for key in ("all_reduce", "backend_rs_ag", "ring_rs_ag"):
                if integers:
                    assert torch.equal(o[key], total), key
                else:
                    assert torch.allclose(o[key], total, **SUM_ORDER_TOL), key
            assert torch.equal(o["all_reduce"], out[0]["all_reduce"])  # every rank the same

    # receive posted before send, fused into one batch: runs under the suite's NCCL rules
    assert pool.run(exchange_worker, args=(True,)) == [[1] * 4, [0] * 4, [3] * 4, [2] * 4]
