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
from ppdit.runtime.observe.timing import exchange
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

    exchange(1 - ctx.rank, ctx.wire)  # the pair's communicator exists: only the wait is late
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
    from ppdit.parallel.layer_split.ranks import _Rank, _warm_up, build_stage_model
    from ppdit.parallel.layer_split.schedule import LayerSplitPlan
    from ppdit.runtime.observe.trace import Tracer
    from ppdit.sampler import Request, SamplingConfig

    plan = LayerSplitPlan(tuple(Request(i, 10 + i) for i in range(micro)), 2, micro,
                          sampling=SamplingConfig(num_steps=2), timeout_s=30)
    lanes = build_lanes() if fixed else None
    model = build_stage_model(plan, ctx.rank)
    if fixed:  # as the runner does: first launches before any posting
        _warm_up(ctx, plan, model)
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


def device_wide(ctx: RankContext, job) -> object:
    """``rounds_worker`` with every ``Placement.synchronize`` device-wide: the order timing and
    tracing had before they synchronised the stream only (``runtime.device``). Under the
    rules the device-wide sync waits for every posted operation, as ``cudaDeviceSynchronize``
    waits for a posted NCCL receive. Run it in a launch of its own: the rank is patched."""
    from ppdit.runtime.device import Placement
    from ppdit.runtime.rounds import rounds_worker

    stream_only = Placement.synchronize
    Placement.synchronize = lambda self, device_wide=True: stream_only(self, True)
    try:
        return rounds_worker(ctx, job)
    finally:
        Placement.synchronize = stream_only


def cold_decoder(ctx: RankContext, job) -> object:
    """``rounds_worker`` with decode overlap's decoder warm-up cut: its first VAE launches come
    after chunk 1's receive is posted. Run it in a launch of its own: the rank is patched."""
    from ppdit.parallel.decode_overlap import ranks
    from ppdit.runtime.rounds import rounds_worker

    ranks._Decoder.warm = lambda self, plan: None
    return rounds_worker(ctx, job)


SYNCS = ("stream", "device", "first launch", "cudaFree", "graph capture")  # what rank 0 does


def sync_with_a_receive_posted(ctx: RankContext, how: str) -> str:
    """Rank 0 posts a receive from rank 1 ahead (answers come up one lane), then synchronises
    (``how``: one of ``SYNCS``) and sends rank 1 the go (down the other lane); rank 1 answers
    only after the go. A stream sync passes; a device-wide one, explicit or one CUDA makes by
    itself, waits for the receive, whose sender waits for rank 0."""
    from ppdit.runtime.comm.mesh import build_lanes

    lanes = build_lanes([0, 1])
    down, up = lanes.between(0, 1), lanes.between(1, 0)
    for lane in (down, up):
        exchange(1 - ctx.rank, ctx.wire, lane)
    if ctx.rank == 0:
        ahead = ctx.wire.recv(torch.zeros(4), 1, up)
        _sync(ctx, how)
        wait_for(ctx.wire.send(torch.ones(4), 1, down), 20, "go")
        wait_for(ahead, 20, "answer")
    else:
        wait_for(ctx.wire.recv(torch.zeros(4), 0, down), 20, "go")
        wait_for(ctx.wire.send(torch.ones(4), 0, up), 20, "answer")
    return "done"


def _sync(ctx: RankContext, how: str) -> None:
    """One of ``SYNCS``, as ppdit's code does it."""
    from ppdit.cuda_graph import StepGraph
    from ppdit.model import build_model
    from ppdit.sampler import SamplingConfig

    if how in ("stream", "device"):
        ctx.placement.synchronize(device_wide=how == "device")
    elif how == "first launch":
        type("NeverRunHere", (torch.nn.Identity,), {})()(torch.zeros(1))  # a new module type
    elif how == "cudaFree":
        ctx.placement.empty_cache()
    else:
        StepGraph(build_model("tiny"), latent_shape=(1, 4, 1, 4, 4), placement=ctx.placement,
                  sampling=SamplingConfig(num_steps=2, guidance_scale=1.0)).close()


def batch_then_collective(ctx: RankContext, same_order: bool) -> float:
    """Rank 0 posts a batched exchange with rank 1, then all-reduces; rank 1 all-reduces first
    (or, ``same_order``, batches first too). On NCCL both run on the group's one stream."""
    import torch.distributed as dist

    peer, x, got = 1 - ctx.rank, torch.full((4,), float(ctx.rank)), torch.zeros(4)
    total = torch.ones(1)
    if ctx.rank == 0 or same_order:
        works = ctx.wire.batch([("send", x, peer), ("recv", got, peer)])
        dist.all_reduce(total)
    else:
        dist.all_reduce(total)
        works = ctx.wire.batch([("send", x, peer), ("recv", got, peer)])
    for w in works:
        wait_for(w, 20, "batched exchange")
    return float(total) + float(got[0])


def batched_against_unbatched(ctx: RankContext) -> float:
    """Rank 0 sends un-batched; rank 1 receives in a batch: two communicators on NCCL (the
    pair's is built first, so only the mismatch is left)."""
    exchange(1 - ctx.rank, ctx.wire)
    got = torch.zeros(4)
    if ctx.rank == 0:
        wait_for(ctx.wire.send(torch.ones(4), 1), 20, "un-batched send")
    else:
        (work,) = ctx.wire.batch([("recv", got, 0)])
        wait_for(work, 20, "batched receive")
    return float(got[0])


def first_op_blocks(ctx: RankContext, warmed: bool) -> str:
    """Step split's credit loop on two lanes (frames down, credits up). Rank 1 posts its
    first credit, then receives a frame; rank 0 sends the frame, then receives the credit.
    Gloo passes; on NCCL the credit's posting blocks in the pair's set-up until rank 0 posts
    on that lane, which it does only after its frame is received: unless the warm-up built
    both lanes' communicators first (``warmed``)."""
    from ppdit.runtime.comm.mesh import build_lanes

    lanes = build_lanes([0, 1])
    down, up = lanes.between(0, 1), lanes.between(1, 0)
    if warmed:
        for lane in (down, up):
            exchange(1 - ctx.rank, ctx.wire, lane)
    frame, credit = torch.zeros(64), torch.zeros(1)
    if ctx.rank == 1:
        sent = ctx.wire.send(credit, 0, up)
        wait_for(ctx.wire.recv(frame, 0, down), 20, "frame")
        wait_for(sent, 20, "credit")
    else:
        wait_for(ctx.wire.send(frame, 1, down), 20, "frame")
        wait_for(ctx.wire.recv(credit, 1, up), 20, "credit")
    return "done"


def timeout_raised_after_posting(ctx: RankContext) -> str:
    """Rank 1 posts its receive under the group's 2 s, then the job's bound rises to 60 s
    (``ctx.expect``); rank 0 sends after 4 s. NCCL keeps the timeout in force at the posting."""
    import time

    exchange(1 - ctx.rank, ctx.wire)
    if ctx.rank == 0:
        time.sleep(4)
        wait_for(ctx.wire.send(torch.zeros(4), 1), 20, "late message")
    else:
        posted = ctx.wire.recv(torch.zeros(4), 0)
        ctx.follows_work = True
        ctx.expect(60)
        wait_for(posted, 20, "late message")
    return "done"


def wait_past_the_group(ctx: RankContext) -> str:
    """Rank 1 waits up to 20 s for rank 0's message; rank 0 computes 4 s first (no deadlock:
    it waits for nobody). A group timeout below 4 s ends rank 1's wait."""
    import time

    exchange(1 - ctx.rank, ctx.wire)
    if ctx.rank == 0:
        time.sleep(4)
        wait_for(ctx.wire.send(torch.zeros(4), 1), 20, "late message")
    else:
        wait_for(ctx.wire.recv(torch.zeros(4), 0), 20, "late message")
    return "done"
