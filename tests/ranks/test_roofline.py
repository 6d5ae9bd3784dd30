"""The link model's inputs measured on two real gloo ranks: a send/all-reduce sweep over message
sizes gives the latency and bandwidth the roofline's comm terms use."""

from __future__ import annotations

from ppdit.analysis.measure import (
    comm_sweep,
    link_from_sweep,
)
from ppdit.runtime.processes.launch import launch


def test_comm_sweep_on_two_ranks(pools):
    sweep = launch(comm_sweep, 2, args=([4096, 65536],), threads_per_rank=1, timeout_s=120,
                   pool=pools(2))[0]
    assert sweep["bytes"] == [4096, 65536]
    latency, bandwidth = link_from_sweep(sweep)
    assert 0 < latency < 1 and bandwidth > 0
    assert all(t > 0 for t in sweep["allreduce_s"])
