"""Checker for lab 04: run it with ``pytest labs/lab04_tp_linear``."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).parent
# The all-reduce adds TP partial sums; one dense matmul adds the same products in another
# order. In fp32 at these sizes the difference is a few ulps of values of order 1.
TP_TOL = {"rtol": 1e-5, "atol": 1e-5}
D, FF = 64, 128


def _weights(seed: int = 0, tokens: int = 10):
    g = torch.Generator().manual_seed(seed)
    w1, b1 = torch.randn(FF, D, generator=g) / D**0.5, torch.randn(FF, generator=g)
    w2, b2 = torch.randn(D, FF, generator=g) / FF**0.5, torch.randn(D, generator=g)
    x = torch.randn(3, tokens, D, generator=g)
    return x, w1, b1, w2, b2


def dense(x, w1, b1, w2, b2):
    """The single-device reference (Wan's FFN uses the tanh GELU)."""
    return F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2)


def tp_worker(ctx, impl_path: str, seed: int = 0, tokens: int = 10):
    """On every rank: load the student's file, shard, run the TP block eagerly and compiled."""
    import torch.distributed as dist

    from ppdit.teaching.labkit import load_module

    impl = load_module(impl_path)
    x, w1, b1, w2, b2 = _weights(seed, tokens)
    w1_r, b1_r, w2_r = impl.shard(w1, b1, w2, ctx.rank, ctx.world_size)
    assert w1_r.shape == (FF // ctx.world_size, D), f"w1 shard has shape {tuple(w1_r.shape)}"
    assert w2_r.shape == (D, FF // ctx.world_size), f"w2 shard has shape {tuple(w2_r.shape)}"
    eager = impl.tp_mlp(x, w1_r, b1_r, w2_r, b2, dist.group.WORLD)
    compiled = compile_one_graph(impl.tp_mlp)(x, w1_r, b1_r, w2_r, b2, dist.group.WORLD)
    return eager, compiled


def compile_one_graph(fn):
    """``torch.compile(fn, fullgraph=True)`` with a backend that only inspects the graph.

    ``fullgraph=True`` turns every graph break into an error, and graph breaks are all Dynamo
    (the tracer) decides, so no code generation is needed to find them: the backend keeps the
    captured FX graph, checks its collectives and runs it as it is. That keeps the check to
    about a second. Dynamo *rewrites* a synchronous in-place ``dist.all_reduce(t)`` into
    ``t.copy_(funcol.all_reduce(t))`` (``traceable_collective_remaps``), so that one compiles
    without a break; the graph still shows it, as a ``copy_`` of the collective's result.
    """
    import torch._dynamo

    def inspect_graph(gm, example_inputs):
        _check_collectives(gm.graph)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend=inspect_graph)

    def run(*args):
        try:
            return compiled(*args)
        except torch._dynamo.exc.Unsupported as err:
            first = str(err).strip().splitlines()[0]
            raise AssertionError(
                f"torch.compile(tp_mlp, fullgraph=True) found a graph break: {first}. Write "
                "the block as one graph: funcol.all_reduce returns the reduced tensor, no "
                "async_op / wait(), no .item() or print() inside.") from err

    return run


def _check_collectives(graph) -> None:
    reduces = [n for n in graph.nodes if "all_reduce" in str(n.target)]
    waited = {n for n in graph.nodes if "wait_tensor" in str(n.target)}
    for n in graph.nodes:
        if str(n.target).startswith("copy_") and any(a in waited for a in n.args):
            raise AssertionError(
                "tp_mlp reduces in place with torch.distributed.all_reduce (c10d): Dynamo "
                "could trace it only by rewriting it to funcol.all_reduce plus a copy_ back "
                "into your tensor, and with async_op=True it breaks the graph. Use "
                "funcol.all_reduce(partial, 'sum', group), which returns the sum.")
    if len(reduces) != 1:
        raise AssertionError(f"the compiled tp_mlp has {len(reduces)} all-reduces: the Megatron "
                             "split needs exactly one, after the row-parallel linear")


def check(impl, pool=None) -> None:
    """Run the student's TP block on 2 ranks, eagerly and through ``torch.compile(fullgraph=True)``;
    every rank must hold the dense output, and the compiled graph one functional all-reduce.
    ``pool``: live ranks to reuse (the test suite's); a student's run starts fresh ones."""
    from ppdit.teaching.labkit import hidden_cases, run_on_ranks

    with hidden_cases() as rng:  # weights and a token count drawn now: a hidden case
        seed, tokens = rng.randrange(10_000), rng.randint(1, 24)
        outs = run_on_ranks(tp_worker, 2, "lab 04", (impl.__file__, seed, tokens), pool)
        ref = dense(*_weights(seed, tokens))
        for rank, (eager, compiled) in enumerate(outs):
            torch.testing.assert_close(eager, ref, **TP_TOL, msg=lambda m, r=rank: (
                f"rank {r} ({tokens} tokens): {m}"))
            torch.testing.assert_close(compiled, eager, rtol=0, atol=0)  # the same graph


def test_lab04():
    from ppdit.teaching.labkit import lab_implementation

    check(lab_implementation(HERE / "lab04_tp_linear.py"))
