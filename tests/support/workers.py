"""Workers the multi-rank tests launch (spawn needs them in an importable module)."""

from __future__ import annotations

import os
import signal
import time

import torch

from ppdit.parallel.step_split.ranks import StepStageRunner
from ppdit.runtime.comm.wire import FrameReceiver, FrameSender, FrameSpec, recv_tensor, send_tensor
from ppdit.runtime.observe.timing import exchange
from ppdit.runtime.processes.rank import RankContext


def die_on(ctx: RankContext, bad_rank: int) -> int:
    """``bad_rank`` is killed with SIGKILL (no Python cleanup at all); the others wait on it."""
    if ctx.rank == bad_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    recv_tensor(bad_rank, ctx.wire, timeout_s=600)
    return ctx.rank


def recv_never(ctx: RankContext, timeout_s: float = 2.0) -> int:
    """Rank 1 waits for a tensor rank 0 never sends: the P2P timeout turns it into an error.
    (One message each way first: NCCL builds a pair's communicator at its first operation,
    which blocks until both ranks have posted one, whatever the receive's timeout says.)"""
    exchange(1 - ctx.rank, ctx.wire)
    if ctx.rank == 1:
        recv_tensor(0, ctx.wire, timeout_s=timeout_s)
    else:
        time.sleep(timeout_s + 5)  # stay alive so the failure is the timeout, not a dead peer
    return ctx.rank


def echo_lines(ctx: RankContext) -> int:
    print(f"hello from rank {ctx.rank}")
    return ctx.rank


def sleep_forever(ctx: RankContext) -> None:
    time.sleep(3600)


def emit_progress(ctx: RankContext) -> int:
    for i in range(3):
        ctx.emit(("tick", i))
    return ctx.rank


def hello_echo_and_emit(ctx: RankContext) -> dict:
    """``echo_lines`` + ``emit_progress`` + ``hello`` in one job."""
    from ppdit.runtime.processes.hello import hello

    echo_lines(ctx)
    emit_progress(ctx)
    return hello(ctx)


def tensors_round_trip(ctx: RankContext) -> list[torch.Tensor] | None:
    """Rank 0 sends assorted tensors (one non-contiguous); rank 1 returns what it got."""
    g = torch.Generator().manual_seed(0)
    cases = [torch.randn(2, 3, 4, generator=g), torch.arange(10, dtype=torch.int64),
             torch.randn(4, 6, generator=g).t(),  # non-contiguous: must be made contiguous
             torch.randn(3, generator=g).to(torch.bfloat16), torch.tensor(True)]
    if ctx.rank == 0:
        for t in cases:
            send_tensor(t.to(ctx.device), 1, ctx.wire)
        return cases
    return [recv_tensor(0, ctx.wire) for _ in cases]


def frames(ctx: RankContext, n: int = 5) -> dict | None:
    """Rank 0 sends n frames, some zero-copy through claim(); rank 1 returns payloads + meta."""
    spec = FrameSpec((2, 3), torch.float32, meta_slots=3)
    if ctx.rank == 0:
        tx = FrameSender(spec, 1, ctx.wire, max_in_flight=2)
        sent, claimed_ptrs = [], []
        for i in range(n):
            x = torch.full((2, 3), float(i), device=ctx.device)
            if i % 2:
                buf = tx.claim()
                claimed_ptrs.append(buf.data_ptr())
                torch.mul(x, 1, out=buf)
                tx.send(buf, [i, 10 * i])
            else:
                tx.send(x, [i, 10 * i])
            sent.append(x)
        tx.flush()
        return {"sent": sent, "claimed": claimed_ptrs}
    rx = FrameReceiver(spec, 0, ctx.wire, depth=2)
    got = [rx.recv(copy=True) for _ in range(n)]
    return {"payloads": [p for p, _ in got], "meta": [m for _, m in got]}


def mismatched_frames(ctx: RankContext) -> None:
    """The two sides build different FrameSpecs: the receiver must say so."""
    if ctx.rank == 0:
        tx = FrameSender(FrameSpec((4,), torch.float32, 1), 1, ctx.wire)
        tx.send(torch.zeros(4, device=ctx.device), [0])
        time.sleep(5)  # keep the sender alive while the receiver reads the header
    else:
        FrameReceiver(FrameSpec((5,), torch.float32, 1), 0, ctx.wire, timeout_s=20).recv()


class SlowStepRunner(StepStageRunner):
    """Step split whose every step also sleeps ``SLOW_STEP_S``: a model far slower than the
    tiny one (14B at 480p spends minutes upstream before a first handoff), in seconds."""

    SLOW_STEP_S = 0.3

    def __init__(self, ctx, plans):
        super().__init__(ctx, plans)
        for den in self.dens:
            if den is not None:
                den.step_batch = _slowed(den.step_batch, self.SLOW_STEP_S)


def _slowed(step_batch, seconds: float):
    def slow(*args, **kwargs):
        time.sleep(seconds)
        return step_batch(*args, **kwargs)
    return slow


def how_started(ctx: RankContext, name: str) -> dict:
    """What a rank inherited from its caller: an environment variable, the working directory,
    its start method (multiprocessing's), whether torch came with the process."""
    import multiprocessing
    import os

    return {"env": os.environ.get(name), "cwd": os.getcwd(),
            "method": multiprocessing.get_start_method(allow_none=True),
            "parent": multiprocessing.parent_process().pid, "ppid": os.getppid()}


def longer_than_the_bounds(ctx: RankContext, work_s: float, late_s: float) -> dict:
    """Each rank says its work needs ``work_s`` (``ctx.expect``); rank 0 then computes
    ``late_s`` before an all-reduce that rank 1 entered at once: longer than the job's and the
    group's starting bounds, within the work's."""
    import torch.distributed as dist

    ctx.expect(work_s)
    if ctx.rank == 0:
        time.sleep(late_s)
    dist.all_reduce(torch.ones(1))
    return {"bound_s": ctx.bound_s,
            "watchdog": __import__("os").environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING")}


def group_timeouts(ctx: RankContext) -> list[float]:
    """The timeout of the world and of a group the mesh made after it, in seconds."""
    import torch.distributed as dist

    from ppdit.runtime.comm.mesh import build_lanes

    lanes = build_lanes()
    groups = (dist.distributed_c10d._get_default_group(), lanes.up)
    return [g._get_backend(torch.device("cpu")).options._timeout.total_seconds() for g in groups]
