"""What the tensor-parallel tests of both lanes share: the tiny preset, TP's communication
formula on it, the variant's short name; and the workers (several checks per launch: each
launch costs seconds)."""

from __future__ import annotations

import torch.distributed as dist

from ppdit.analysis.tp_styles import TPCompare, TPVariant, tp_compare_on_rank
from ppdit.model import build_model
from ppdit.parallel.step_split.plan import StepSplitPlan
from ppdit.parallel.step_split.ranks import StepStageRunner
from ppdit.parallel.tensor.comms import tp_comm_per_block
from ppdit.parallel.tensor.parallelize import parallelize_wan
from ppdit.presets import get_preset
from ppdit.runtime.comm.mesh import Mesh
from ppdit.runtime.processes.rank import RankContext
from ppdit.runtime.rounds import Job, rounds_worker

V = TPVariant
TINY = get_preset("tiny")


def tiny_tp_comm(tp: int):
    """TP's all-reduces of one block of the tiny preset at degree ``tp``."""
    return tp_comm_per_block(batch=TINY.latent_shape[0], tokens=TINY.num_tokens(),
                             text_len=TINY.text_len, dim=TINY.dim, tp=tp)


def tp4_errors_then_pp_tp(ctx: RankContext, spec: TPCompare, plan: StepSplitPlan) -> dict:
    """On 4 ranks: TP=4 variants, the errors a wrong arrangement raises, then PP x TP."""
    out = {"tp4": tp_compare_on_rank(ctx, spec), "errors": {}}
    three = Mesh.of(tp=3).build(ctx.rank)  # every rank makes every group, members or not
    if three is not None:
        out["errors"]["heads"] = _error(lambda: parallelize_wan(build_model("tiny"),
                                                                tp_group=three.group("tp")))
    out["errors"]["mesh"] = _error(lambda: Mesh.of(tp=5).build(ctx.rank))
    out["errors"]["dims"] = _error(lambda: Mesh((("tp", 2), ("tp", 2))))
    sharded = parallelize_wan(build_model("tiny"), tp_group=dist.group.WORLD)
    out["errors"]["twice"] = _error(lambda: parallelize_wan(sharded, tp_group=dist.group.WORLD))
    dist.barrier()
    out["pp_tp"] = rounds_worker(ctx, Job(StepStageRunner, (plan,), 1))
    return out


def _error(fn) -> str | None:
    try:
        fn()
    except ValueError as e:
        return str(e)
    return None
