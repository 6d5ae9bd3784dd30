"""The rank's side of a launch: the ordered life of one spawned (or torchrun-started) process.

Order inside a rank (``run_rank``): threads -> import diffusers -> ``setup`` (build the model)
-> ``init_process_group`` -> worker -> barrier -> ``destroy_process_group``. Importing diffusers
(which imports ``torch._dynamo``) *after* the process group exists made gloo teardown leave
threads behind and occasionally abort at exit on this machine, so it happens first.
"""

from __future__ import annotations

import dataclasses
import io
import os
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch

from ppdit.runtime.device import Placement, choose_backend, local_world_size, placement_for
from ppdit.runtime.trace import Tracer

DEFAULT_TIMEOUT_S = 300.0


@dataclass
class RankContext:
    """What a worker gets besides its own arguments."""

    rank: int
    world_size: int
    local_rank: int
    placement: Placement
    tracer: Tracer
    prepared: Any = None  # whatever ``setup`` returned, built before the process group existed
    _events: Any = field(default=None, repr=False)
    # perf_counter_ns at each phase of the rank's start: "spawn" (parent, before starting it),
    # "entry" (interpreter up, torch + ppdit imported), "setup" (model built), "group" (process
    # group ready). Workers add their own ("warm-up"); see ppdit.runtime.trace.boot_trace.
    boot_ns: dict[str, int] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        """This rank's device."""
        return self.placement.device

    def emit(self, event: Any) -> None:
        """Send a small progress event to the caller's ``on_event`` (dropped under torchrun)."""
        if self._events is not None:
            self._events.put((self.rank, event))


@dataclass(frozen=True)
class RankSpec:
    """How to run a worker on each rank (picklable: it travels to the spawned processes)."""

    world_size: int
    port: int
    backend: str
    threads: int
    worker: Callable[..., Any]
    setup: Callable[..., Any] | None
    args: tuple
    pg_timeout_s: float
    spawn_ns: int = 0  # when the parent started the processes (perf_counter_ns)


def child_main(rank: int, spec: RankSpec, results_q, events_q, log_path: str) -> None:
    """A spawned rank: redirect output, run, report exactly one message, exit."""
    entry_ns = time.perf_counter_ns()
    _redirect_output(log_path)
    init = f"tcp://127.0.0.1:{spec.port}"
    try:
        result = run_rank(rank, spec.world_size, rank, spec, init, events_q,
                          {"spawn": spec.spawn_ns, "entry": entry_ns})
        results_q.put(("ok", rank, dumps(result)))
    except BaseException:
        # The time lets the caller tell the first failure from the peers it dragged down.
        results_q.put(("error", rank, (time.monotonic(), traceback.format_exc())))
        results_q.close()
        results_q.join_thread()
        os._exit(1)  # peers may be blocked on us; skip a teardown that could hang
    results_q.close()
    results_q.join_thread()


def run_rank(rank: int, world_size: int, local_rank: int, spec: RankSpec, init_method: str,
             events_q, boot_ns: dict[str, int] | None = None) -> Any:
    """The ordered life of one rank (see the module docstring for why this order)."""
    import torch.distributed as dist

    torch.set_num_threads(spec.threads)
    import diffusers  # noqa: F401  (pulls in torch._dynamo before the process group exists)

    boot_ns = dict(boot_ns or {"entry": time.perf_counter_ns()})
    prepared = spec.setup(rank, world_size, *spec.args) if spec.setup is not None else None
    boot_ns["setup"] = time.perf_counter_ns()
    placement = placement_for(spec.backend, local_rank)
    owns_group = not dist.is_initialized()
    if owns_group:
        dist.init_process_group(spec.backend, init_method=init_method, rank=rank,
                                world_size=world_size,
                                timeout=timedelta(seconds=spec.pg_timeout_s))
    boot_ns["group"] = time.perf_counter_ns()
    ctx = RankContext(rank, world_size, local_rank, placement, Tracer(rank, placement),
                      prepared, events_q, boot_ns)
    # No try/finally: on an exception the group is left as it is and the process exits at once.
    # Tearing it down first would break the peers' receives *before* this rank reports, and a
    # teardown with peers blocked on us can itself hang.
    result = spec.worker(ctx, *spec.args)
    dist.barrier()  # nobody tears down while a peer still receives from it
    if owns_group:
        dist.destroy_process_group()
    return result


def run_under_torchrun(
    worker: Callable[..., Any],
    *,
    args: Sequence[Any] = (),
    setup: Callable[..., Any] | None = None,
    backend: str = "auto",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[Any] | None:
    """Run the same worker in a process started by ``torchrun``; rank 0 gets every result.

    ``torchrun --nproc-per-node N -m ppdit demo`` lands here: the rendezvous comes from env://
    (RANK, WORLD_SIZE, MASTER_ADDR, ...), and results are gathered to rank 0 as Python objects.
    """
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    spec = RankSpec(world, 0, choose_backend(backend, local_world_size()),
                      int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())),
                      _gathering(worker), setup, tuple(args), timeout_s)
    return run_rank(rank, world, local_rank, spec, "env://", None)


def _gathering(worker: Callable[..., Any]) -> Callable[..., Any]:
    def gather_to_rank0(ctx: RankContext, *args):
        import torch.distributed as dist

        result = _to_cpu(worker(ctx, *args))
        out = [None] * ctx.world_size if ctx.rank == 0 else None
        dist.gather_object(result, out, dst=0)
        return out

    return gather_to_rank0


def in_torchrun() -> bool:
    """Whether this process was started by torchrun (or another env:// launcher)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def _redirect_output(log_path: str) -> None:
    """Point fds 1 and 2 (Python *and* C++ output, e.g. gloo warnings) at the rank's log."""
    import sys

    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0), line_buffering=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", buffering=0), line_buffering=True)


def _to_cpu(obj: Any) -> Any:
    """Move every tensor inside dicts, lists, tuples and dataclasses to the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_cpu(v) for v in obj]
    if isinstance(obj, tuple):
        items = [_to_cpu(v) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: _to_cpu(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                   if f.init}
        return dataclasses.replace(obj, **changes)
    return obj


def dumps(obj: Any) -> bytes:
    """Serialise with torch.save: plain bytes through the queue, no shared-memory handles that
    die with the child."""
    buf = io.BytesIO()
    torch.save(_to_cpu(obj), buf)
    return buf.getvalue()


def loads(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=False)
