"""Start real ranks from a notebook cell (or the CLI), run a worker on each, return its results.

``launch(worker, world_size, args=...)`` spawns one process per rank with
``torch.multiprocessing``'s spawn context, gives each a ``RankContext`` (rank, placement, tracer)
and returns ``[worker(ctx, *args) for each rank]`` as CPU objects. It is built so that a mistake
in a lesson never leaves the kernel stuck:

* a rank that raises -> ``RankError`` in the caller, naming the rank, with its traceback;
* a rank that dies (a signal, ``os._exit``) -> ``RankError`` with its exit code and last output;
* nothing back within ``timeout_s`` -> ``LaunchTimeout`` naming the ranks still running;
* on every path (Ctrl-C included) every child is terminated, then killed, then reaped.

Each rank's stdout/stderr goes to a log file that the caller echoes, prefixed ``[rank r]``, so
child output shows up in the notebook cell (a spawned child's fd 1 is not the cell's stream).

The workers must live in an importable module: spawn pickles the function by name. The same
worker runs under ``torchrun`` through ``run_under_torchrun``.

The rank's side (what each process does, and in which order) is ``ppdit.runtime.rank``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch.multiprocessing as mp

from ppdit.runtime.device import choose_backend
from ppdit.runtime.rank import (
    DEFAULT_TIMEOUT_S,
    RankContext,
    RankSpec,
    child_main,
    in_torchrun,
    loads,
    run_under_torchrun,
)

__all__ = ["LaunchTimeout", "RankContext", "RankError", "in_torchrun", "launch",
           "run_under_torchrun"]
_POLL_S = 0.05
_GRACE_S = 2.0  # how long a dead rank's last queue message may still be in flight


class RankError(RuntimeError):
    """A rank raised or died; ``rank`` says which, ``details`` holds its traceback or log."""

    def __init__(self, rank: int, message: str, details: str = ""):
        self.rank = rank
        self.details = details
        super().__init__(f"rank {rank} {message}" + (f"\n{details}" if details else ""))


class LaunchTimeout(TimeoutError):
    """The ranks did not all finish within the launcher's ``timeout_s``."""


def launch(
    worker: Callable[..., Any],
    world_size: int,
    *,
    args: Sequence[Any] = (),
    setup: Callable[..., Any] | None = None,
    backend: str = "auto",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    threads_per_rank: int | None = None,
    on_event: Callable[[int, Any], None] | None = None,
    echo: bool = True,
    pg_timeout_s: float | None = None,
) -> list[Any]:
    """Run ``worker(ctx, *args)`` on ``world_size`` spawned ranks; return their results by rank.

    ``setup(rank, world_size, *args)`` runs in each rank before ``init_process_group`` (build the
    model there); its result is ``ctx.prepared``. ``threads_per_rank`` defaults to the cores
    divided by the ranks, at least 1. ``pg_timeout_s`` bounds each collective / P2P wait inside
    the ranks (default: ``timeout_s``).
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size={world_size!r} must be an integer >= 1")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s={timeout_s} must be > 0")
    threads = threads_per_rank or max(1, (os.cpu_count() or 1) // world_size)
    spec = RankSpec(
        world_size=world_size, port=_free_port(), backend=choose_backend(backend, world_size),
        threads=threads, worker=worker, setup=setup, args=tuple(args),
        pg_timeout_s=pg_timeout_s or timeout_s, spawn_ns=time.perf_counter_ns(),
    )
    run = _Run(spec, echo=echo, on_event=on_event)
    try:
        return run.wait(timeout_s)
    finally:
        run.close()


class _Run:
    """The parent's side of one launch: children, their queues and their logs."""

    def __init__(self, spec: RankSpec, *, echo: bool, on_event):
        self.spec = spec
        self.echo = echo
        self.on_event = on_event
        ctx = mp.get_context("spawn")
        self.results_q = ctx.Queue()
        self.events_q = ctx.Queue() if on_event is not None else None
        self.logdir = Path(tempfile.mkdtemp(prefix="ppdit-launch-"))
        self.offsets = [0] * spec.world_size
        self.procs = []
        for rank in range(spec.world_size):
            log = self.logdir / f"rank{rank}.log"
            p = ctx.Process(target=child_main, name=f"ppdit-rank{rank}", daemon=True,
                            args=(rank, spec, self.results_q, self.events_q, str(log)))
            p.start()
            self.procs.append(p)

    def wait(self, timeout_s: float) -> list[Any]:
        """Collect one message per rank, failing fast on the first error or death."""
        deadline = time.monotonic() + timeout_s
        results: dict[int, Any] = {}
        dead_since: dict[int, float] = {}
        while len(results) < self.spec.world_size:
            self._drain_events()
            self._echo_logs()
            errors = self._collect(results)
            if errors:
                raise self._root_cause(errors, results)
            for rank, p in enumerate(self.procs):
                if rank in results or p.exitcode is None:
                    continue
                first_seen = dead_since.setdefault(rank, time.monotonic())
                if time.monotonic() - first_seen > _GRACE_S:
                    raise RankError(rank, f"died ({_describe_exit(p.exitcode)}) without a result;",
                                    self._log_tail(rank))
            if time.monotonic() > deadline:
                missing = [r for r in range(self.spec.world_size) if r not in results]
                tails = "\n".join(self._log_tail(r) for r in missing)
                raise LaunchTimeout(f"ranks {missing} did not finish within {timeout_s:.0f} s "
                                    f"(a receive without a matching send?)\n{tails}")
            time.sleep(_POLL_S)
        self._join_finished()
        return [results[r] for r in range(self.spec.world_size)]

    def _collect(self, results: dict[int, Any]) -> list[tuple[float, int, str]]:
        """Move finished results into ``results``; return (time, rank, traceback) of failures."""
        errors = []
        for kind, rank, payload in self._drain_results():
            if kind == "error":
                errors.append((payload[0], rank, payload[1]))
            else:
                results[rank] = loads(payload)
        return errors

    def _root_cause(self, found: list[tuple[float, int, str]], results: dict[int, Any]
                    ) -> RankError:
        """One failure usually drags its peers down (their receives break). Wait briefly for
        the rest of the story, then blame a rank that died silently, else the first to raise."""
        time.sleep(0.5)
        errors = [(r, tb) for _, r, tb in sorted(found + self._collect(results))]
        raised = {r for r, _ in errors}
        others = ", ".join(str(r) for r, _ in errors[1:])
        for rank, p in enumerate(self.procs):
            if p.exitcode is not None and p.exitcode < 0 and rank not in raised | set(results):
                first = errors[0][0]
                return RankError(rank, f"died ({_describe_exit(p.exitcode)}); rank {first} then "
                                 f"failed talking to it:", errors[0][1] + self._log_tail(rank))
        also = f" (then rank(s) {others} failed too)" if others else ""
        return RankError(errors[0][0], f"raised an exception{also}:", errors[0][1])

    def _drain_results(self):
        out = []
        while True:
            try:
                out.append(self.results_q.get_nowait())
            except Exception:  # queue.Empty, or a closed pipe from a killed child
                return out

    def _drain_events(self) -> None:
        while self.events_q is not None:
            try:
                rank, event = self.events_q.get_nowait()
            except Exception:
                return
            self.on_event(rank, event)

    def _echo_logs(self) -> None:
        if not self.echo:
            return
        for rank in range(self.spec.world_size):
            text = self._read_new(rank)
            for line in text.splitlines():
                print(f"[rank {rank}] {line}", flush=True)

    def _read_new(self, rank: int) -> str:
        path = self.logdir / f"rank{rank}.log"
        if not path.exists():
            return ""
        with path.open("rb") as f:
            f.seek(self.offsets[rank])
            data = f.read()
        cut = data.rfind(b"\n") + 1  # echo whole lines only
        self.offsets[rank] += cut
        return data[:cut].decode(errors="replace")

    def _log_tail(self, rank: int, max_chars: int = 4000) -> str:
        path = self.logdir / f"rank{rank}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return f"--- last output of rank {rank} ---\n{text[-max_chars:]}" if text else ""

    def _join_finished(self) -> None:
        """All results are in: let ranks tear down, then reap; a slow exit is killed later."""
        deadline = time.monotonic() + 30
        for p in self.procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        self._drain_events()
        self._echo_logs()
        for rank, p in enumerate(self.procs):
            if p.exitcode not in (0, None):
                warnings.warn(f"rank {rank} returned its result but exited with "
                              f"{_describe_exit(p.exitcode)}", RuntimeWarning, stacklevel=3)

    def close(self) -> None:
        """Terminate, kill and reap every child still alive; remove the logs."""
        with contextlib.suppress(OSError):
            self._echo_logs()
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(timeout=3)
            if p.is_alive():
                p.kill()
                p.join(timeout=3)
        for q in (self.results_q, self.events_q):
            if q is not None:
                q.cancel_join_thread()
                q.close()
        shutil.rmtree(self.logdir, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
