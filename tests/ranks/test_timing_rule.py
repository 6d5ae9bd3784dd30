"""The P2P warm-up before a timed region (``ppdit.runtime.observe.timing.warm_up_pairs``) on two
CPU ranks, on a bare wire and through NCCL's rules: the pair and the world warmed, a timed
all-reduce after it. The timing rule itself is tests/unit/test_timing_rule.py."""

from __future__ import annotations

import pytest
import torch

from ppdit.runtime.observe.timing import timed, warm_up_pairs
from ppdit.runtime.processes.launch import launch
from ppdit.runtime.processes.rank import RankContext


def warm_pair(ctx: RankContext, through_rules: bool) -> int:
    """Warm the pair and the world, then one timed all-reduce (what a timed round would do)."""
    wire = ctx.wire if through_rules else ctx.wire.bare()
    warm_up_pairs(wire, [(0, 1), (1, 1)], ctx.rank)
    x = torch.ones(4)
    with timed(ctx.placement) as t:
        torch.distributed.all_reduce(x)
    assert t.seconds >= 0 and x.tolist() == [2.0] * 4
    return ctx.rank


@pytest.mark.parametrize("through_rules", [False, True])
def test_warm_up_pairs_exchanges_on_two_ranks(pools, through_rules):
    assert launch(warm_pair, 2, args=(through_rules,), pool=pools(2)) == [0, 1]
