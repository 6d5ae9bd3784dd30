"""PP x TP: step-split pipeline stages, each of which is a tensor-parallel group.

With ``pp`` stages of ``tp`` ranks (``world_size = pp * tp``), rank ``r`` is stage ``r // tp``,
TP rank ``r % tp`` (``ppdit.runtime.mesh.ParallelDims``). For pp = 2, tp = 2::

                 TP group (all-reduces every block)
    stage 0:   rank 0  ==  rank 1        steps [0, n/2)
                 |           |           each TP rank sends the latent to its counterpart:
                 v           v           PP group {0, 2} and PP group {1, 3}
    stage 1:   rank 2  ==  rank 3        steps [n/2, n)

Nothing here is new machinery: it is step split (``ppdit.parallel.step_split``) with ``tp > 1``,
whose stage models are sharded with ``ppdit.parallel.tensor``. Every TP rank ends a step with
the same latent (the all-reduces hand every rank the same sum and everything else is
replicated), so each sends it to its counterpart in the next stage; no broadcast inside the
group is needed. (A leader that sends and then broadcasts moves the latent once instead of
``tp`` times but adds a collective to every handoff; for a latent of a few hundred KB the
parallel sends are the simpler choice.) The ranks of a stage issue the same TP collectives in
the same order because they run the same steps of the same requests, and never touch another
stage's group.
"""

from __future__ import annotations

from ppdit.parallel.step_split.plan import StepSplitPlan, make_plan
from ppdit.parallel.step_split.run import StepSplitResult, run_step_split
from ppdit.sampler import SamplingConfig


def make_pp_tp_plan(pp: int, tp: int, num_requests: int = 2, *,
                    sampling: SamplingConfig | None = None, **kwargs) -> StepSplitPlan:
    """A step-split plan for ``num_requests`` requests on ``pp`` stages of ``tp`` ranks."""
    return make_plan(pp, num_requests, sampling=sampling or SamplingConfig(num_steps=4), tp=tp,
                     **kwargs)


def run_pp_tp(plan: StepSplitPlan, **launch_kwargs) -> StepSplitResult:
    """Launch ``pp * tp`` ranks (one thread each unless told otherwise) and run ``plan``."""
    launch_kwargs.setdefault("timeout_s", 300)
    return run_step_split(plan, **launch_kwargs)


__all__ = ["make_pp_tp_plan", "run_pp_tp"]
