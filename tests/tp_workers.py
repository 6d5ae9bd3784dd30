"""Workers for the tensor-parallel tests: several checks per launch (each launch costs seconds)."""

from __future__ import annotations

import torch.distributed as dist

from ppdit.model import build_model
from ppdit.parallel.pp_tp import PPxTPPlan, build_mesh, pp_tp_worker
from ppdit.parallel.tensor import ParallelDims, parallelize_wan
from ppdit.parallel.tensor_compare import TPCompare, tp_compare_worker
from ppdit.runtime.launch import RankContext


def tp4_errors_then_pp_tp(ctx: RankContext, spec: TPCompare, plan: PPxTPPlan) -> dict:
    """On 4 ranks: TP=4 variants, the errors a wrong arrangement raises, then PP x TP."""
    out = {"tp4": tp_compare_worker(ctx, spec), "errors": {}}
    three = dist.new_group([0, 1, 2])  # every rank creates every group, members or not
    if ctx.rank < 3:
        out["errors"]["heads"] = _error(lambda: parallelize_wan(build_model("tiny"),
                                                                tp_group=three))
    out["errors"]["mesh"] = _error(lambda: build_mesh(ParallelDims(1, 2, 2), ctx.rank))
    sharded = parallelize_wan(build_model("tiny"), tp_group=dist.group.WORLD)
    out["errors"]["twice"] = _error(lambda: parallelize_wan(sharded, tp_group=dist.group.WORLD))
    dist.barrier()
    out["pp_tp"] = pp_tp_worker(ctx, plan)
    return out


def _error(fn) -> str | None:
    try:
        fn()
    except ValueError as e:
        return str(e)
    return None
