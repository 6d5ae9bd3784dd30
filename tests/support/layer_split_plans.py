"""The layer-split plans both lanes use: the schedules the unit lane checks without ranks are
the ones the ranks lane runs."""

from __future__ import annotations

from ppdit.parallel.layer_split.schedule import LayerSplitPlan
from ppdit.sampler import Request, SamplingConfig

THREE = SamplingConfig(num_steps=3)
GUIDED = SamplingConfig(num_steps=3, guidance_scale=4.0)


def reqs(n):
    return tuple(Request(i, 10 + i) for i in range(n))


PLANS = {
    # P = 2, 3, 4; M from 1 to 8; V = 1 and 2; wrap on and off; uneven block partitions
    "p2_m1": LayerSplitPlan(reqs(2), 2, 1, sampling=THREE),
    "p2_m2_flush": LayerSplitPlan(reqs(2), 2, 2, wrap=False, sampling=THREE),
    "p3_m3_uneven": LayerSplitPlan(reqs(3), 3, 3, sampling=THREE),  # 4 blocks: 2 + 1 + 1
    "p4_m4": LayerSplitPlan(reqs(4), 4, 4, sampling=THREE),
    "p2_v2_m4": LayerSplitPlan(reqs(4), 2, 4, virtual=2, sampling=THREE),
    "p2_v2_m3_flush": LayerSplitPlan(reqs(3), 2, 3, virtual=2, wrap=False, sampling=THREE),
    "p2_m8_cfg": LayerSplitPlan(reqs(4), 2, 8, sampling=GUIDED),
    "p3_m5_cfg_costs": LayerSplitPlan(reqs(3), 3, 5, sampling=GUIDED,
                                      block_costs=(3.0, 1.0, 1.0, 1.0)),
}
