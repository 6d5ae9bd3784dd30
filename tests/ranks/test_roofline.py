"""The roofline accounting must agree with what torch counts and with arithmetic done by hand.

FLOPs are checked against ``torch.utils.flop_counter.FlopCounterMode`` on real forwards of the
tiny and small presets (and a small Wan VAE). On CPU, ``F.scaled_dot_product_attention`` runs
``_scaled_dot_product_flash_attention_for_cpu``, for which FlopCounterMode has no formula (it
counts 0), so the attention runs under the MATH backend, where the counter sees its two bmms.
"""

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
