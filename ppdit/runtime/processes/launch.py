"""Start real ranks from a notebook cell (or the CLI), run a worker on each, return its results.

``launch(worker, world_size, args=...)`` runs ``worker(ctx, *args)`` on ``world_size`` ranks
and returns ``[result of rank 0, result of rank 1, ...]`` as CPU objects. Each rank gets a
``RankContext`` (rank, placement, wire, what ``setup`` built). By default the ranks are
fresh processes, started for this call and stopped after it; with ``pool=`` they are the live
ranks of a ``ppdit.runtime.processes.pool.RankPool``, and the call pays no start-up.

A mistake in a lesson never leaves the kernel stuck: what a pool guarantees (``pool.py``:
failures named, hangs bounded, interrupts honoured, no rank left behind) holds for every launch.
The workers must live in an importable module: ranks import them by name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ppdit._spawn_entry import in_torchrun
from ppdit.runtime.processes.pool import RankPool
from ppdit.runtime.processes.rank import DEFAULT_TIMEOUT_S, run_under_torchrun


def launch(worker: Callable[..., Any], world_size: int, *, args: Sequence[Any] = (),
           setup: Callable[..., Any] | None = None, backend: str = "auto",
           device: str | None = None, stage: bool | None = None,
           nccl_rules: bool | int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
           threads_per_rank: int | None = None,
           on_event: Callable[[int, Any], None] | None = None, echo: bool = True,
           pg_timeout_s: float | None = None, pool: RankPool | None = None,
           follow_work: bool = False) -> list[Any] | None:
    """Run ``worker(ctx, *args)`` on ``world_size`` ranks; return their results by rank.

    ``setup(rank, world_size, *args)`` runs in each rank first (build the model there; on fresh
    ranks before ``init_process_group``); its result is ``ctx.prepared``. ``threads_per_rank``:
    default the cores over the ranks, at least 1. ``device``, ``backend``, ``stage`` and
    ``nccl_rules`` refine the placement rule (``ppdit.runtime.device``). ``pg_timeout_s`` bounds
    each collective / P2P wait inside fresh ranks (default ``timeout_s``; a pool's ranks keep
    theirs). ``follow_work``: both bound the job until its ranks have measured their work, which
    may then raise them (``RankContext.expect``). ``pool``: a live pool of exactly ``world_size``.

    Under ``torchrun`` the same call runs ``worker`` here and returns every rank's result on
    rank 0, ``None`` elsewhere: every ``run_*`` entry point works unchanged from a torchrun script.
    """
    if in_torchrun():
        return run_under_torchrun(worker, args=args, setup=setup, backend=backend, device=device,
                                  nccl_rules=nccl_rules, timeout_s=timeout_s, on_event=on_event,
                                  follow_work=follow_work)
    job = dict(args=args, setup=setup, timeout_s=timeout_s, threads_per_rank=threads_per_rank,
               on_event=on_event, echo=echo, follow_work=follow_work)
    if pool is not None:
        if pool.world_size != world_size:
            raise ValueError(f"this job needs world_size={world_size} ranks but the pool has "
                             f"{pool.world_size}: a pool runs jobs on all of its ranks")
        return pool.run(worker, **job)
    with RankPool(world_size, backend=backend, device=device, stage=stage, nccl_rules=nccl_rules,
                  threads_per_rank=threads_per_rank, timeout_s=pg_timeout_s or timeout_s,
                  echo=echo) as fresh:
        return fresh.run(worker, **job)
