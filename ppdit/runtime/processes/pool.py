"""A pool of live ranks: start-up paid once, jobs run many times, nothing left behind.

Starting a rank costs a process, its imports and a process group: 5-12 s for spawned ranks on
a GPU host; a CPU rank forked from a server that imported torch once (``processes.start``) still
pays ppdit's imports and the group. A lesson launching dozens of times pays that dozens of
times; ``ranks(n)`` keeps n initialised ranks across calls and notebook cells instead::

    with ranks(2) as pool:
        a = pool.run(worker, args=(plan_a,))
        b = run_step_split(plan_b, pool=pool)     # every run_* entry point takes pool=

Results equal fresh launches: each job builds what it needs (``setup``), with the same seeds.
What a pool guarantees, on every path:

* a rank raises or dies -> ``RankError`` naming it, with its traceback or last output; the pool
  stops (its peers may be stuck talking to the dead rank) and the next ``run`` starts afresh;
* no result within ``timeout_s`` -> ``LaunchTimeout`` naming the ranks still running;
* an interrupt (Ctrl-C, Jupyter's) -> every rank ends, ``KeyboardInterrupt`` is re-raised;
* SIGTERM to the caller -> every rank ends, then the signal takes its course; SIGKILL -> each
  rank sees its caller gone and exits (``_spawn_entry.watch_parent``);
* the interpreter's exit closes every pool still open.

Each rank's stdout/stderr goes to a log file the caller echoes, prefixed ``[rank r]``, so child
output shows up in the notebook cell (a spawned child's fd 1 is not the cell's stream).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ppdit._spawn_entry import main as spawn_entry
from ppdit.runtime.comm.wire import WorkBound
from ppdit.runtime.device import decide_placement
from ppdit.runtime.processes.rank import DEFAULT_TIMEOUT_S, PoolSpec, RankJob, child_main, loads
from ppdit.runtime.processes.start import check_main_guard, start_context

_POLL_S = 0.05
_GRACE_S = 2.0  # how long a dead rank's last queue message may still be in flight
_STOP_S = 3.0  # how long ranks get to exit after SIGTERM before SIGKILL


class RankError(RuntimeError):
    """A rank raised or died; ``rank`` says which, ``details`` holds its traceback or log."""

    def __init__(self, rank: int, message: str, details: str = ""):
        self.rank = rank
        self.details = details
        super().__init__(f"rank {rank} {message}" + (f"\n{details}" if details else ""))


class LaunchTimeout(TimeoutError):
    """The ranks did not all finish within the job's ``timeout_s``."""


class RankPool:
    """``world_size`` ranks that start on the first ``run`` and serve jobs until ``close``."""

    def __init__(self, world_size: int, *, backend: str = "auto", device: str | None = None,
                 stage: bool | None = None, nccl_rules: bool | int | None = None,
                 threads_per_rank: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 echo: bool = True):
        if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
            raise ValueError(f"world_size={world_size!r} must be an integer >= 1")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s={timeout_s} must be > 0")
        self.world_size = world_size
        # One decision for every rank (see ppdit.runtime.device): made here, in the caller, so
        # a request that cannot work fails before any process starts.
        self.placement = decide_placement(world_size, backend=backend, device=device,
                                          stage=stage, nccl_rules=nccl_rules)
        self.threads = threads_per_rank or max(1, (os.cpu_count() or 1) // world_size)
        self.timeout_s, self.echo = timeout_s, echo
        self._procs: list = []
        self._jobs = 0
        self._spent = False  # a rank reported its communicators aborted: restart first
        self._deadline = 0.0  # of the job being waited for (moved by WorkBound events)
        self._on_event: Callable[[int, Any], None] | None = None

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return bool(self._procs)

    @property
    def pids(self) -> list[int]:
        """Process ids of the live ranks (empty when stopped)."""
        return [p.pid for p in self._procs]

    def _start(self, first: RankJob) -> None:
        """Spawn the ranks; ``first`` is their first job (its setup runs before the group)."""
        self._spent = False
        check_main_guard()
        ctx = start_context(self.placement.kind)
        main_thread = threading.current_thread() is threading.main_thread()
        # A forked rank's parent is the fork server, whose one thread lives as long as it does.
        forked = ctx.get_start_method() == "forkserver"
        self._spec = PoolSpec(self.world_size, _free_port(), self.placement, self.threads,
                              self.timeout_s, os.getpid(), pdeathsig=main_thread or forked,
                              spawn_ns=time.perf_counter_ns())
        self._results, self._events = ctx.Queue(), ctx.Queue()
        self._job_qs = [ctx.Queue() for _ in range(self.world_size)]
        self._logdir = Path(tempfile.mkdtemp(prefix="ppdit-ranks-"))
        self._offsets = [0] * self.world_size
        for rank in range(self.world_size):
            # Arguments go pickled through a light entry point, which ties the rank to this
            # process before importing torch (see ppdit._spawn_entry).
            payload = pickle.dumps((child_main, rank, self._spec, first,
                                    str(self._logdir / f"rank{rank}.log")))
            args = (self._spec.parent_pid, self._spec.pdeathsig, payload, dict(os.environ),
                    self._job_qs[rank], self._results, self._events)
            p = ctx.Process(target=spawn_entry, name=f"ppdit-rank{rank}", daemon=True, args=args)
            with _children_ignore_sigint(main_thread):
                p.start()
            self._procs.append(p)
        _LIVE.add(self)
        _guard_sigterm()

    def close(self) -> None:
        """Stop every rank (politely if idle, else terminate, then kill) and reap it; an
        interrupt meanwhile still ends every rank, then says so in one line."""
        if not self._procs:
            return
        try:
            self._goodbye()
        except KeyboardInterrupt:
            _stop(self._procs)
            raise KeyboardInterrupt(f"interrupted: the {self.world_size} ranks were stopped, "
                                    "none is left") from None
        finally:
            self._release()

    def _goodbye(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._echo_logs()
        for q in self._job_qs:
            with contextlib.suppress(OSError, ValueError):
                q.put(None)  # an idle rank leaves its loop and tears its group down
        deadline = time.monotonic() + _STOP_S
        for p in self._procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        _stop(self._procs)

    def _release(self) -> None:
        for q in (self._results, self._events, *self._job_qs):
            q.cancel_join_thread()
            q.close()
        shutil.rmtree(self._logdir, ignore_errors=True)
        self._procs = []
        _LIVE.discard(self)

    def _abort(self) -> None:
        """Stop every rank now (after a failure or an interrupt): no goodbye, no waiting."""
        _stop(self._procs)
        self.close()

    def __enter__(self) -> RankPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        with contextlib.suppress(Exception):
            self._abort()

    # -- running jobs -----------------------------------------------------------------------

    def run(self, worker: Callable[..., Any], *, args: Sequence[Any] = (),
            setup: Callable[..., Any] | None = None, timeout_s: float | None = None,
            threads_per_rank: int | None = None,
            on_event: Callable[[int, Any], None] | None = None,
            echo: bool | None = None, follow_work: bool = False) -> list[Any]:
        """Run ``worker(ctx, *args)`` on every rank (after ``setup(rank, world_size, *args)``,
        whose result is ``ctx.prepared``); return the results by rank as CPU objects.
        ``follow_work``: ``timeout_s`` bounds the job until its ranks have measured their work
        (``RankContext.expect``); a longer bound from the work then moves the deadline."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        if timeout_s <= 0:
            raise ValueError(f"timeout_s={timeout_s} must be > 0")
        self._jobs += 1
        job = RankJob(self._jobs, worker, setup, tuple(args), threads_per_rank,
                      time.perf_counter_ns(), follow_work)
        self._on_event = on_event
        echo_before, self.echo = self.echo, self.echo if echo is None else echo
        try:
            if not self.started:
                self._start(job)
            else:
                # the caller's import path travels with the job (see rank._next_job)
                message = (list(sys.path), pickle.dumps(job))
                for q in self._job_qs:
                    q.put(message)
            out = self._wait(job.job_id, timeout_s)
            if self._spent:  # a rank lost its communicators (a P2P timeout): start afresh
                self._abort()
            return out
        except KeyboardInterrupt:
            self._abort()  # every rank ends before the caller hears of it
            raise KeyboardInterrupt(f"interrupted: the {self.world_size} ranks were stopped, "
                                    "none is left") from None
        except BaseException:
            self._abort()  # failed, timed out or interrupted: no rank may live on
            raise
        finally:
            self.echo, self._on_event = echo_before, None

    def _wait(self, job_id: int, timeout_s: float) -> list[Any]:
        """Collect one message per rank, failing fast on the first error or death."""
        start = time.monotonic()
        self._deadline = start + timeout_s  # WorkBound events may move it later
        results: dict[int, Any] = {}
        dead_since: dict[int, float] = {}
        while len(results) < self.world_size:
            self._drain_events()
            self._echo_logs()
            errors = self._collect(job_id, results)
            if errors:
                raise self._root_cause(job_id, errors, results)
            for rank, p in enumerate(self._procs):
                if rank in results or p.exitcode is None:
                    continue
                first_seen = dead_since.setdefault(rank, time.monotonic())
                if time.monotonic() - first_seen > _GRACE_S:
                    raise RankError(rank, f"died ({describe_exit(p.exitcode)}) without a "
                                          "result;", self._log_tail(rank))
            if time.monotonic() > self._deadline:
                missing = [r for r in range(self.world_size) if r not in results]
                tails = "\n".join(self._log_tail(r) for r in missing)
                bound = self._deadline - start
                raise LaunchTimeout(f"ranks {missing} did not finish within {bound:.0f} s "
                                    f"(a receive without a matching send?)\n{tails}")
            time.sleep(_POLL_S)
        self._drain_events()
        self._echo_logs()
        return [results[r] for r in range(self.world_size)]

    def _collect(self, job_id: int, results: dict[int, Any]) -> list[tuple[float, int, str]]:
        """Move finished results into ``results``; return (time, rank, traceback) of failures."""
        errors = []
        for kind, rank, got_id, payload in self._drain(self._results):
            if kind == "error":
                errors.append((payload[0], rank, payload[1]))
            elif got_id == job_id:
                results[rank] = loads(payload)
                self._spent |= kind == "ok-last"  # that rank's communicators were aborted
        return errors

    def _root_cause(self, job_id: int, found: list[tuple[float, int, str]],
                    results: dict[int, Any]) -> RankError:
        """One failure usually drags its peers down (their receives break). Wait briefly for
        the rest of the story, then blame a rank that died silently, else the first to raise."""
        time.sleep(0.5)
        errors = [(r, tb) for _, r, tb in sorted(found + self._collect(job_id, results))]
        raised = {r for r, _ in errors}
        others = ", ".join(str(r) for r, _ in errors[1:])
        for rank, p in enumerate(self._procs):
            if p.exitcode is not None and p.exitcode < 0 and rank not in raised | set(results):
                first = errors[0][0]
                return RankError(rank, f"died ({describe_exit(p.exitcode)}); rank {first} then "
                                 f"failed talking to it:", errors[0][1] + self._log_tail(rank))
        also = f" (then rank(s) {others} failed too)" if others else ""
        return RankError(errors[0][0], f"raised an exception{also}:", errors[0][1])

    @staticmethod
    def _drain(q) -> list:
        out = []
        while True:
            try:
                out.append(q.get_nowait())
            except Exception:  # queue.Empty, or a closed pipe from a killed child
                return out

    def _drain_events(self) -> None:
        for rank, event in self._drain(self._events):
            if isinstance(event, WorkBound):  # the work, measured, needs longer: wait for it
                self._deadline = max(self._deadline, time.monotonic() + event.seconds)
            elif self._on_event is not None:
                self._on_event(rank, event)

    # -- child output -----------------------------------------------------------------------

    def _echo_logs(self) -> None:
        if not self.echo:
            return
        for rank in range(self.world_size):
            for line in self._read_new(rank).splitlines():
                print(f"[rank {rank}] {line}", flush=True)

    def _read_new(self, rank: int) -> str:
        path = self._logdir / f"rank{rank}.log"
        if not path.exists():
            return ""
        with path.open("rb") as f:
            f.seek(self._offsets[rank])
            data = f.read()
        cut = data.rfind(b"\n") + 1  # echo whole lines only
        self._offsets[rank] += cut
        return data[:cut].decode(errors="replace")

    def _log_tail(self, rank: int, max_chars: int = 4000) -> str:
        path = self._logdir / f"rank{rank}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return f"--- last output of rank {rank} ---\n{text[-max_chars:]}" if text else ""


ranks = RankPool  # ``with ranks(n) as pool:`` reads as what it does (see the module)


# -- every pool ends with its caller ------------------------------------------------------------

_LIVE: weakref.WeakSet[RankPool] = weakref.WeakSet()
_GUARDED = False


def live_pids() -> set[int]:
    """Process ids of every live pool rank of this process (tests tell them from orphans)."""
    return {pid for pool in list(_LIVE) for pid in pool.pids}


def close_all() -> None:
    """Stop the ranks of every pool of this process (at exit, or on SIGTERM)."""
    for pool in list(_LIVE):
        with contextlib.suppress(Exception):
            pool._abort()


@contextlib.contextmanager
def _children_ignore_sigint(main_thread: bool):
    """Start children with SIGINT ignored from their first instruction: Jupyter's interrupt
    signals the kernel's whole process group, and a rank hit while it imports torch prints a
    traceback and a C++ ``terminate called`` into the cell. An ignored disposition survives
    ``exec`` and Python keeps it at start-up, so the caller alone gets the interrupt and stops the
    ranks. (Only the main thread may change handlers; elsewhere ``ppdit._spawn_entry`` ignores
    SIGINT on its first line, a little later.)"""
    if not main_thread:
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)


def _guard_sigterm() -> None:
    """Once, from the main thread: on SIGTERM, stop every pool's ranks, then let the signal
    do what it would have done (the previous handler, or the default: exit)."""
    global _GUARDED
    if _GUARDED or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum, frame):
        close_all()
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)
    _GUARDED = True


atexit.register(close_all)


def _stop(procs: list) -> None:
    """SIGTERM every live process, give them ``_STOP_S`` together, SIGKILL the rest, reap."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + _STOP_S
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(timeout=_STOP_S)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def describe_exit(code: int | None) -> str:
    """A process exit code in words: "exit code 1", "killed by SIGKILL"."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
