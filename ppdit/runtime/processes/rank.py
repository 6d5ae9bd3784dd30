"""The rank's side: the ordered life of one spawned (or torchrun-started) process.

A spawned rank (``child_main``) lives as long as its pool: it starts, joins the process group
once, then runs jobs from its queue until told to stop::

    redirect output -> threads -> import diffusers -> [first job's setup]
    -> init_process_group -> { job: setup -> worker -> barrier -> result } ... -> destroy

Importing diffusers (and ``torch._dynamo``) *after* the group exists made gloo's teardown leave
threads behind and sometimes abort at exit, so it happens first, as does the first job's
``setup``. A rank never outlives its caller (``_spawn_entry`` ties it to the caller before any
heavy import) and ignores SIGINT: an interrupt is the caller's to decide, and it ends every rank.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import pickle
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from ppdit._spawn_entry import watch_torchrun_agent
from ppdit.runtime.comm.nccl_rules import NcclRules
from ppdit.runtime.comm.wire import Wire, WorkBound, abort, communicator_aborted
from ppdit.runtime.device import Placement, PlacementDecision, decide_placement, local_world_size
from ppdit.runtime.processes import hosts

DEFAULT_TIMEOUT_S = 300.0


@dataclass
class RankContext:
    """What a worker gets besides its own arguments."""

    rank: int
    world_size: int
    placement: Placement
    prepared: Any = None  # whatever the job's ``setup`` returned
    _events: Any = field(default=None, repr=False)
    # perf_counter_ns at each phase of the rank's start: "spawn" (in the parent), "entry",
    # "setup", "group"; a job on a live pool rank has "submit" (parent), "dispatch" and "setup".
    # Workers add their own ("warm-up"); see observe.trace.BOOT_PHASES.
    boot_ns: dict[str, int] = field(default_factory=dict)
    # NCCL's P2P rules kept by this gloo rank (ppdit.runtime.comm.nccl_rules), or None
    rules: NcclRules | None = None
    follows_work: bool = False  # the job's bounds follow its measured work (``expect``)
    bound_s: float = 0.0  # every group's timeout now (the process group's, at first)

    @property
    def device(self) -> torch.device:
        return self.placement.device

    @property
    def wire(self) -> Wire:
        """How this rank's messages travel (its device, staging, and NCCL's rules if it keeps
        them): what every point-to-point call takes, ``FrameSender(spec, peer, ctx.wire)``."""
        return Wire(self.placement.device, self.placement.staged, self.rules)

    def expect(self, seconds: float) -> None:
        """The work from here takes at most ``seconds`` (``work_bound`` of a measured step):
        every group's timeout (NCCL's watchdog's bound) and the rules' rise to it, and the
        caller's deadline moves; never lowered (a peer may still load); a fixed one stays."""
        if not self.follows_work or seconds <= self.bound_s:
            return
        self.bound_s = seconds
        for group in list(c10d._world.pg_map):
            with contextlib.suppress(ValueError):  # a group this rank is not in
                c10d._set_pg_timeout(timedelta(seconds=seconds), group)
        if self.rules is not None:
            self.rules.pg_timeout_s = max(self.rules.pg_timeout_s, seconds)
        self.emit(WorkBound(seconds))

    def emit(self, event: Any) -> None:
        """Send a small progress event to the caller's ``on_event`` (under torchrun: rank 0's)."""
        if self._events is not None:
            self._events.put((self.rank, event))


@dataclass(frozen=True)
class PoolSpec:
    """How the ranks of a pool start (picklable: it travels to the spawned processes)."""

    world_size: int
    port: int
    placement: PlacementDecision  # device, backend and staging of every rank, and why
    threads: int
    pg_timeout_s: float
    parent_pid: int
    pdeathsig: bool  # False when the pool was started from a thread that may end first
    spawn_ns: int = 0  # when the parent started the processes (perf_counter_ns)


@dataclass(frozen=True)
class RankJob:
    """One job for every rank of a pool: ``worker(ctx, *args)`` after ``setup``."""

    job_id: int
    worker: Callable[..., Any]
    setup: Callable[..., Any] | None = None
    args: tuple = ()
    threads: int | None = None  # None: the pool's
    submit_ns: int = 0  # when the parent handed it over (perf_counter_ns)
    follow_work: bool = False  # bounds from the measured work (RankContext.expect)


def child_main(rank: int, spec: PoolSpec, first: RankJob | None, jobs_q, results_q, events_q,
               log_path: str) -> None:
    """A spawned rank: serve jobs until ``None`` arrives; report one message per job."""
    entry_ns = time.perf_counter_ns()
    _redirect_output(log_path)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller decides; it then ends us
    job = first
    try:
        torch.set_num_threads(spec.threads)
        import diffusers  # noqa: F401  (pulls in torch._dynamo before the process group exists)

        prepared = _setup(first, rank, spec.world_size)
        setup_ns = time.perf_counter_ns()
        placement = spec.placement.for_rank(rank)
        name_failures()
        dist.init_process_group(placement.backend, init_method=f"tcp://127.0.0.1:{spec.port}",
                                rank=rank, world_size=spec.world_size,
                                timeout=timedelta(seconds=spec.pg_timeout_s))
        rules = _rules(placement, rank, spec.pg_timeout_s)
        boot = {"spawn": spec.spawn_ns, "entry": entry_ns, "setup": setup_ns,
                "group": time.perf_counter_ns()}
        while True:
            job = job or _next_job(jobs_q)
            if job is None:
                break
            if job is not first:
                boot = {"submit": job.submit_ns, "dispatch": time.perf_counter_ns()}
                prepared = _setup(job, rank, spec.world_size)
                boot["setup"] = time.perf_counter_ns()
            torch.set_num_threads(job.threads or spec.threads)
            ctx = RankContext(rank, spec.world_size, placement, prepared, events_q, boot, rules,
                              job.follow_work, spec.pg_timeout_s)
            result = job.worker(ctx, *job.args)
            aborted = communicator_aborted() or _closing_barrier()
            # After a P2P timeout NCCL has aborted the group: no closing barrier (it would
            # fail), and this rank serves no further job ("ok-last" stops the pool). A barrier
            # broken by a peer that failed leaves this rank's own work done: the peer is named.
            results_q.put(("ok" if aborted is None else "ok-last", rank, job.job_id, dumps(result)))
            if aborted is not None:
                break
            job = prepared = None
        if communicator_aborted() is None:
            dist.destroy_process_group()
    except BaseException:
        # The time lets the caller tell the first failure from the peers it dragged down.
        results_q.put(("error", rank, getattr(job, "job_id", -1),
                       (time.monotonic(), traceback.format_exc())))
        results_q.close()
        results_q.join_thread()
        # No teardown: peers may be blocked on us, and destroying the group first would break
        # their receives before this rank's report arrives.
        os._exit(1)
    for q in (events_q, results_q):  # everything this rank owes the caller, flushed
        q.close()
        q.join_thread()
    sys.stdout.flush()
    sys.stderr.flush()
    # No interpreter teardown: unloading torch and diffusers took 1.7 s per rank here, paid by
    # every launch as it waited for its ranks to exit (and after 3 s they were terminated).
    # It also skips a P2P thread that may still sit in an aborted group.
    os._exit(0)


def _next_job(jobs_q) -> RankJob | None:
    """The next job from the caller (``None``: stop), after taking its import path (the
    caller may have imported the worker's module by path since this rank started)."""
    message = jobs_q.get()
    if message is None:
        return None
    path, payload = message
    sys.path.extend(p for p in path if p not in sys.path)
    return pickle.loads(payload)


def _closing_barrier() -> str | None:
    """Nobody moves on while a peer still receives from it; None, or why it broke."""
    try:
        dist.barrier()
    except RuntimeError as err:
        return abort(f"the closing barrier broke: {err}")
    return None


def name_failures() -> None:
    """Before the group exists: on NCCL a failed operation aborts its communicators and raises
    in the rank (2), which reports it as on gloo, instead of the watchdog killing the process
    (3, torch's default: the caller would hear "killed by SIGABRT"). A user's value is kept."""
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")


def _rules(placement: Placement, rank: int, pg_timeout_s: float) -> NcclRules | None:
    """NCCL's P2P rules for a gloo rank that asked for them (made on every rank: collective),
    bounded by the process group's timeout as NCCL's watchdog bounds every operation."""
    if placement.nccl_rules is None:
        return None
    return NcclRules(rank, placement.nccl_rules, pg_timeout_s=pg_timeout_s)


def _setup(job: RankJob | None, rank: int, world_size: int) -> Any:
    return None if job is None or job.setup is None else job.setup(rank, world_size, *job.args)


def run_under_torchrun(worker: Callable[..., Any], *, args: Sequence[Any] = (),
                       setup: Callable[..., Any] | None = None, backend: str = "auto",
                       device: str | None = None, nccl_rules: bool | int | None = None,
                       timeout_s: float = DEFAULT_TIMEOUT_S,
                       on_event: Callable[[int, Any], None] | None = None,
                       follow_work: bool = False) -> list[Any] | None:
    """Run the same worker in a process started by ``torchrun``; rank 0 gets every result.
    ``torchrun --nproc-per-node N -m ppdit demo`` lands here: the rendezvous comes from env://
    (RANK, WORLD_SIZE, MASTER_ADDR, ...); torchrun owns the processes (SIGINT / SIGTERM to it
    reach every rank). On several hosts (``--nnodes``) rank 0 says where every rank is, a slow
    join says what it waits for, and a lost connection is named by rank and host
    (``runtime.processes.hosts``). Rank 0's own progress events reach ``on_event``."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # torchrun gives each rank a session of its own: if the agent is SIGKILLed, only this watch
    # ends the rank (a no-op when ``python -m ppdit`` started watching before its imports)
    watch_torchrun_agent()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    import diffusers  # noqa: F401  (see the module docstring)

    prepared = setup(rank, world, *args) if setup is not None else None
    decision = decide_placement(local_world_size(), backend=backend, device=device,
                                nccl_rules=nccl_rules)
    placement = decision.for_rank(local_rank)
    owns_group = not dist.is_initialized()
    with hosts.joining(rank, world):  # says what it waits for if the group takes long to form
        if owns_group and local_world_size() < world:  # several hosts: one backend for all
            hosts.agree_on_backend(placement.backend, rank, world)
        if owns_group:
            name_failures()
            dist.init_process_group(placement.backend, init_method="env://", rank=rank,
                                    world_size=world, timeout=timedelta(seconds=timeout_s))
        peers = hosts.who_is_where(rank, world)
    where = hosts.where_sentence(peers)
    if rank == 0 and where is not None:
        print(where, flush=True)
    heartbeat = hosts.watch_peers(peers, rank)  # a host that dies while we compute: named, we exit
    # rank 0's progress events go straight to ``on_event`` (no parent process to queue them to)
    direct = SimpleNamespace(put=lambda item: on_event(*item))
    events = direct if on_event is not None and rank == 0 else None
    ctx = RankContext(rank, world, placement, prepared, events,
                      rules=_rules(placement, rank, timeout_s), follows_work=follow_work,
                      bound_s=timeout_s)
    try:
        result = _to_cpu(worker(ctx, *args))
        out = [None] * world if rank == 0 else None
        dist.gather_object(result, out, dst=0)
    except Exception as e:
        lost = hosts.lost_peer(e, peers, rank)
        if lost is not None:
            print(lost, file=sys.stderr, flush=True)
        raise
    if heartbeat is not None:
        heartbeat.set()
    if owns_group:
        dist.destroy_process_group()
    return out


def _redirect_output(log_path: str) -> None:
    """Point fds 1 and 2 (Python *and* C++ output, e.g. gloo warnings) at the rank's log."""
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
        changes = {f.name: _to_cpu(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
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
