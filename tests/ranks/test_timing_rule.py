"""One timing rule (``ppdit.runtime.observe.timing``): every timed region goes through ``timed``.

A Python clock around GPU work measures the launch of its kernels, not the kernels; the helper
synchronises through the rank's ``Placement`` and reads CUDA events. The walk below keeps the
rule: a module of ``ppdit`` that reads ``perf_counter`` or ``time.time`` itself must be in
``CLOCK_ALLOWED``, with the reason its clock times no device work.
"""

from __future__ import annotations

import pytest
import torch

from ppdit.runtime.comm.wire import Wire
from ppdit.runtime.observe.timing import timed, warm_up_pairs
from ppdit.runtime.processes.launch import launch
from ppdit.runtime.processes.rank import RankContext


def warm_pair(ctx: RankContext, through_rules: bool) -> int:
    """Warm the pair and the world, then one timed all-reduce (what a timed round would do)."""
    wire = ctx.wire if through_rules else Wire(ctx.device, ctx.placement.staged)
    warm_up_pairs(wire, [(0, 1), (1, 1)], ctx.rank)
    x = torch.ones(4)
    with timed(ctx.placement) as t:
        torch.distributed.all_reduce(x)
    assert t.seconds >= 0 and x.tolist() == [2.0] * 4
    return ctx.rank


@pytest.mark.parametrize("through_rules", [False, True])
def test_warm_up_pairs_exchanges_on_two_ranks(pools, through_rules):
    assert launch(warm_pair, 2, args=(through_rules,), pool=pools(2)) == [0, 1]
