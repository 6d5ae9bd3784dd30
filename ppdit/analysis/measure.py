"""This machine, measured: a matmul FLOP/s peak, a copy bandwidth, each Wan op timed, and a
two-rank send/recv + all-reduce sweep over loopback (the communication roofline's points).

The hardware table and the predictions built on it live in ``hardware.py``; this module only
measures, so its numbers are the ones a notebook must mark as machine-dependent."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ppdit.analysis.hardware import Hardware
from ppdit.analysis.roofline import Op
from ppdit.runtime.comm.wire import (
    FrameReceiver,
    FrameSender,
    FrameSpec,
    Wire,
    recv_tensor,
    send_tensor,
)
from ppdit.runtime.device import Placement, torch_threads
from ppdit.runtime.observe.timing import MIN_ROUNDS, timed, warm_up_pairs
from ppdit.runtime.processes.rank import RankContext


def best_of(fn: Callable[[], object], placement: Placement | None = None, *, calls: int = 1,
            repeats: int = 3, before: Callable[[], object] | None = None) -> float:
    """Seconds per call: the best of ``repeats`` timed runs of ``calls`` calls each (``before``,
    e.g. a barrier that starts the ranks together, runs untimed ahead of each run)."""
    best = float("inf")
    for _ in range(repeats):
        if before is not None:
            before()
        with timed(placement) as t:
            for _ in range(calls):
                fn()
        best = min(best, t.seconds / calls)
    return best


def best_time(fn: Callable[[], object], min_time_s: float = 0.02, repeats: int = 3,
              placement: Placement | None = None) -> float:
    """Seconds per call: the best of ``repeats`` runs of ~``min_time_s`` each, after a warm-up.
    The best, not the mean: on a shared machine the other tenants only ever add time, so the
    minimum is the closest to what the hardware can do. ``placement``: where ``fn`` works
    (None: the CPU), so that GPU work is timed by its kernels, not by their launch."""
    fn()
    with timed(placement) as once:
        fn()
    n = max(1, int(min_time_s / max(once.seconds, 1e-7)))
    return best_of(fn, placement, calls=n, repeats=repeats)


def measure_matmul_flops(n: int = 1024, *, threads: int = 1, min_time_s: float = 0.05,
                         repeats: int = 9) -> float:
    """FLOP/s of an fp32 (n, n) @ (n, n) matmul (2 n^3 FLOPs): this CPU's practical peak.
    One thread by default: the machine is shared, and one thread gives a ceiling that the op
    timings (also one thread) can be compared with. Takes under a second."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    with torch_threads(threads):
        return 2 * n**3 / best_time(lambda: torch.mm(a, b), min_time_s, repeats)


def measure_copy_bandwidth(nbytes: int = 1 << 27, *, threads: int = 1,
                           min_time_s: float = 0.05, repeats: int = 9) -> float:
    """Bytes/s of ``dst.copy_(src)`` on buffers far larger than the caches (128 MB each).
    Counts one read and one write per byte copied. A CPU that reads a cache line before
    writing it moves a third stream that is not counted: this is bandwidth as a program sees it."""
    src, dst = torch.ones(nbytes // 4), torch.empty(nbytes // 4)
    with torch_threads(threads):
        return 2 * nbytes / best_time(lambda: dst.copy_(src), min_time_s, repeats)


def measure_machine(threads: int = 1) -> Hardware:
    """This machine as a ``Hardware`` row (fp32 only): measured matmul peak and copy bandwidth."""
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return Hardware(f"this CPU ({threads} thread{'s' if threads > 1 else ''})", None,
                    measure_matmul_flops(threads=threads), None,
                    measure_copy_bandwidth(threads=threads), mem, (), "measured")


def op_runner(op: Op, dtype: torch.dtype = torch.float32) -> Callable[[], object]:
    """A torch call with the shapes of ``op`` (random inputs): what ``time_ops`` times.
    Matmuls and attention run exactly the op; elementwise ops run the closest single torch
    call (e.g. ``F.layer_norm`` for norm + modulation), which is what eager mode would launch."""
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g).to(dtype)

    d = op.dims
    if op.kind == "linear":
        x, w = r(d[0], d[1]), r(d[2], d[1])
        return lambda: F.linear(x, w)
    if op.kind in ("sdpa", "qk", "softmax", "pv"):
        b, h, sq, skv, hd = d
        q, k, v, s = r(b, h, sq, hd), r(b, h, skv, hd), r(b, h, skv, hd), r(b, h, sq, skv)
        return {"sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
                "qk": lambda: q @ k.transpose(-1, -2), "softmax": lambda: s.softmax(-1),
                "pv": lambda: s @ v}[op.kind]
    if op.kind == "patchify":
        b, c, f, hh, ww, dim = d
        x, w = r(b, c, f, hh, ww), r(dim, c, 1, 2, 2)
        return lambda: F.conv3d(x, w, stride=(1, 2, 2))
    if op.kind == "conv":
        b, cin, t, hh, ww, cout, *k = d
        x, w = r(b, cin, t, hh, ww), r(cout, cin, *k)
        return lambda: F.conv3d(x, w, padding=tuple(n // 2 for n in k))
    if op.kind == "rope":  # q and k, each (B, S, H, head_dim): x cos + rotate(x) sin
        q, k, cos, sin = r(*d), r(*d), r(1, d[1], 1, d[3]), r(1, d[1], 1, d[3])
        return lambda: [torch.addcmul(x * cos, x.flip(-1), sin) for x in (q, k)]
    x, y = r(*d), r(*d)
    return {"layernorm": lambda: F.layer_norm(x, d[-1:]), "rmsnorm": lambda: F.rms_norm(x, d[-1:]),
            "gelu": lambda: F.gelu(x, approximate="tanh"), "add": lambda: torch.add(x, y),
            }[op.kind]


@dataclass(frozen=True)
class Timed:
    """A measured op: seconds per call on this machine."""
    op: Op
    seconds: float

    @property
    def achieved_flops(self) -> float:
        """FLOP/s this call reached: the y-coordinate of its point on the measured roofline."""
        return self.op.flops / self.seconds


def time_ops(ops: Sequence[Op], *, threads: int = 1, dtype: torch.dtype = torch.float32,
             min_time_s: float = 0.02) -> list[Timed]:
    """Time every op (one thread by default, like ``measure_machine``); ~0.1 s per op."""
    with torch_threads(threads), torch.no_grad():
        return [Timed(op, best_time(op_runner(op, dtype), min_time_s)) for op in ops]


def ping_pong(x: torch.Tensor, rank: int, peer: int, k: int) -> None:
    """``k`` round trips of ``x`` between two ranks: the lower rank sends first, the other
    answers (a round trip is two one-way messages)."""
    for _ in range(k):
        if rank < peer:
            dist.send(x, peer)
            dist.recv(x, peer)
        else:
            dist.recv(x, peer)
            dist.send(x, peer)


def all_reduces(x: torch.Tensor, k: int) -> None:
    for _ in range(k):
        dist.all_reduce(x)


def handoff_pingpong(ctx: RankContext, shape: tuple[int, ...], rounds: int = 7,
                     iters: int = 50) -> dict[str, dict[str, list[float]]] | None:
    """A latent's handoff, four ways, interleaved round by round; rank 0 gets, per way and
    round, the wall seconds of a one-way trip (``seconds``) and the calling thread's CPU seconds
    per message sent or received (``cpu_seconds``: the host's work, which a busy machine
    stretches far less than wall time and which a GPU does not shrink):

    * ``bare``: ``dist.send`` / ``dist.recv`` of the tensor itself, the floor;
    * ``frame``: step split's handoff (``FrameSender`` / ``FrameReceiver``: one message, payload
      + metadata). As in a pipeline stage, the outgoing latent is already in the claimed frame
      (a stage's last step writes it there), so no copy is timed that the stage would not make;
    * ``layer hop``: layer split's send: the stage's output copied into a frame, received and
      copied out of the receive buffer, as its ``Mailbox`` does;
    * ``header+payload``: ``send_tensor`` / ``recv_tensor``, which describe every message."""
    if ctx.world_size != 2:
        raise ValueError(f"handoff_pingpong needs world_size=2, got {ctx.world_size}")
    # The bare and described trips move the wire's tensor (host memory when staged); the frame
    # trip includes the staging copies a pipeline stage pays.
    x = torch.randn(shape, device=ctx.wire.buffers)
    peer, spec = 1 - ctx.rank, FrameSpec(tuple(shape), x.dtype, meta_slots=2)
    tx, rx = FrameSender(spec, peer, ctx.wire), FrameReceiver(spec, peer, ctx.wire)
    ways = {"bare": _bare, "frame": _frame, "layer hop": _hop, "header+payload": _described}
    out = {k: {w: [] for w in ways} for k in ("seconds", "cpu_seconds")}
    warm_up_pairs(ctx.wire, [(0, 1)], ctx.rank)  # NCCL's pair set-up
    for _ in range(rounds):
        for name, trip in ways.items():
            dist.barrier()
            with timed(ctx.placement) as t:
                for i in range(iters):
                    trip(ctx.rank, peer, x, tx, rx, i)
            out["seconds"][name].append(t.seconds / iters / 2)
            out["cpu_seconds"][name].append(t.cpu_seconds / iters / 2)
    return out if ctx.rank == 0 else None


def _bare(rank, peer, x, tx, rx, i):
    ping_pong(x, rank, peer, 1)


def _frame(rank, peer, x, tx, rx, i):
    if rank == 0:
        tx.send(tx.claim(), [i, 0])
        tx.flush()
        rx.recv()
    else:
        rx.recv()
        tx.send(tx.claim(), [i, 1])
        tx.flush()


def _hop(rank, peer, x, tx, rx, i):
    for sending in ((True, False) if rank == 0 else (False, True)):
        if sending:
            tx.send(x, [i, rank])
            tx.flush()
        else:
            rx.recv(copy=True)


def _described(rank, peer, x, tx, rx, i):
    plain = Wire(x.device)  # the tensor where the bare trip has it, no staging
    if rank == 0:
        send_tensor(x, peer, plain)
        recv_tensor(peer, plain)
    else:
        send_tensor(recv_tensor(peer, plain), peer, plain)


def comm_sweep(ctx, sizes: Sequence[int]) -> dict[str, list[float]] | None:
    """A 2-rank worker (for ``ppdit.runtime.processes.launch``): one-way P2P (half a ping-pong)
    and all-reduce seconds per message size in bytes (fp32 tensors), the best of ``MIN_ROUNDS``
    runs each, after one exchange that sets the pair up. Iteration counts depend only on the
    size, so both ranks agree on them."""
    if ctx.world_size != 2:
        raise ValueError(f"comm_sweep needs world_size=2, got {ctx.world_size}")
    peer, out = 1 - ctx.rank, {"bytes": [], "p2p_s": [], "allreduce_s": []}
    bare = ctx.wire.bare()  # the raw sends below: no rules either
    warm_up_pairs(bare, [(0, 1)], ctx.rank)
    for size in sizes:
        # gloo moves host memory only: ranks that share a GPU time the host transport
        x = torch.zeros(max(1, size // 4), device=bare.buffers)
        iters = max(2, min(30, int(3e7 // size)))
        times = [best_of(fn, ctx.placement, repeats=MIN_ROUNDS, before=dist.barrier) / iters
                 for fn in (partial(ping_pong, x, ctx.rank, peer, iters),
                            partial(all_reduces, x, iters))]
        out["bytes"].append(x.numel() * 4)
        out["p2p_s"].append(times[0] / 2)
        out["allreduce_s"].append(times[1])
    return out if ctx.rank == 0 else None


def link_from_sweep(sweep: dict[str, list[float]]) -> tuple[float, float]:
    """(latency s, bandwidth bytes/s) of a P2P sweep: the fastest one-way trip (the smallest
    message's, in practice) and the best rate any message reached (the large ones')."""
    rates = [n / t for n, t in zip(sweep["bytes"], sweep["p2p_s"], strict=True)]
    return min(sweep["p2p_s"]), max(rates)


