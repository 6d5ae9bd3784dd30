"""Rank workers for ``test_nccl_rules.py``: the orders that hang under NCCL, kept as fixtures
(step split's credit loop is ``ppdit.teaching.hangs.relay``, lesson 01's example).

Each ``*_fixture`` worker replays, with ppdit's own P2P helpers, the message order a layout used
before it was fixed (the ``fixed`` flag switches to the order the layout uses now), so a test
can show the hang under NCCL's rules and its absence after the fix.
"""

from __future__ import annotations

import torch

from ppdit.runtime.comm.mesh import build_lanes
from ppdit.runtime.comm.wire import wait_for
from ppdit.runtime.processes.rank import RankContext


def crossed(ctx: RankContext, fused: bool) -> list[float]:
    """Each of two ranks posts a receive from the other, then a send to it (or both fused)."""
    peer = 1 - ctx.rank
    x, y = torch.full((4,), float(ctx.rank)), torch.empty(4)
    if fused:
        rx, tx = ctx.wire.batch([("recv", y, peer), ("send", x, peer)])
    else:
        rx = ctx.wire.recv(y, peer)
        tx = ctx.wire.send(x, peer)
    wait_for(tx, 20, "send")
    wait_for(rx, 20, "recv")
    return y.tolist()


def both_send_first(ctx: RankContext, numel: int) -> float:
    """Each rank sends to the other, then receives: fine while sends are eager (small), a
    rendezvous deadlock once both are above the limit."""
    peer = 1 - ctx.rank
    x, y = torch.full((numel,), float(ctx.rank)), torch.empty(numel)
    tx = ctx.wire.send(x, peer)
    wait_for(tx, 20, "send")
    wait_for(ctx.wire.recv(y, peer), 20, "recv")
    return float(y[0])


def late_wait(ctx: RankContext, sleep_s: float, timeout_s: float) -> str:
    """Rank 1 posts a receive, works ``sleep_s``, then waits with ``timeout_s``: under NCCL the
    clock started at the posting, so the wait fails at once. Rank 0 never sends."""
    import time

    if ctx.rank == 1:
        work = ctx.wire.recv(torch.zeros(4), 0)
        time.sleep(sleep_s)
        wait_for(work, timeout_s, "late receive")
    return "done"


def both_give_up(ctx: RankContext) -> str:
    """Both ranks wait for a message nobody sends, and catch the timeout: their communicators
    count as aborted, so each skips the closing barrier and still reports."""
    try:
        wait_for(ctx.wire.recv(torch.zeros(4), 1 - ctx.rank), 0.5, "nothing")
    except TimeoutError:
        return "gave up"
    return "received?"


def layer_split_fixture(ctx: RankContext, micro: int, fixed: bool) -> dict:
    """Layer split on 2 ranks through its own executor; pre-fix, every message went on the
    default communicator (``lanes=None``)."""
    from ppdit.parallel.layer_split.ranks import _Rank, build_stage_model
    from ppdit.parallel.layer_split.schedule import LayerSplitPlan
    from ppdit.runtime.observe.trace import Tracer
    from ppdit.sampler import Request, SamplingConfig

    plan = LayerSplitPlan(tuple(Request(i, 10 + i) for i in range(micro)), 2, micro,
                          sampling=SamplingConfig(num_steps=2), timeout_s=30)
    lanes = build_lanes() if fixed else None
    model = build_stage_model(plan, ctx.rank)
    tracer = Tracer(ctx.rank, ctx.placement, enabled=False)
    out = _Rank(ctx, plan, model, tracer, lanes).run()
    return {k: v.sum().item() for k, v in out.items()}


def serve_fixture(ctx: RankContext, fixed: bool) -> str:
    """The controller's overlap order: envelopes posted ahead, results received, on one
    communicator (pre-fix) or one per direction. Envelopes are above the eager limit."""
    lanes = build_lanes() if fixed else None
    down = lanes.between(0, 1) if lanes else None
    up = lanes.between(1, 0) if lanes else None
    n, size = 4, 8192
    if ctx.rank == 0:
        sends = [ctx.wire.send(torch.full((size,), float(i)), 1, down) for i in range(2)]
        for i in range(n):
            res = torch.empty(size)
            wait_for(ctx.wire.recv(res, 1, up), 30, f"result {i}")
            if i + 2 < n:
                sends.append(ctx.wire.send(torch.full((size,), float(i + 2)), 1, down))
        for s in sends:
            wait_for(s, 30, "envelope")
        return "controller"
    pending = []
    for i in range(n):
        env = torch.empty(size)
        wait_for(ctx.wire.recv(env, 0, down), 30, f"envelope {i}")
        pending.append(ctx.wire.send(env * 2, 0, up))
    for s in pending:
        wait_for(s, 30, "result")
    return "mesh"


def slow_reply(ctx: RankContext) -> float:
    """No deadlock, only slowness: rank 1 waits for A (and publishes its queue while it
    stalls), then computes 2 s before it replies; meanwhile rank 0 stalls on the reply. A
    queue published before the compute must not read as a deadlock."""
    import time

    peer, x = 1 - ctx.rank, torch.zeros(4)
    if ctx.rank == 0:
        time.sleep(1.3)  # past the 1 s stall: rank 1 publishes its queue
        wait_for(ctx.wire.send(torch.ones(4), peer), 20, "A")
        wait_for(ctx.wire.recv(x, peer), 20, "B")
        return float(x[0])
    wait_for(ctx.wire.recv(x, peer), 20, "A")
    time.sleep(2.0)  # rank 0 stalls > 1 s on B meanwhile
    wait_for(ctx.wire.send(x * 2, peer), 20, "B")
    return float(x[0])
