"""Checker for lab 05: run it with ``pytest labs/lab05_ulysses``.

Numbers alone do not make an all-to-all: all-gathering every rank's whole slice and keeping
one's heads gives the same numbers for P times the bytes. So the checker also counts what each
rank sends in each of the learner's functions (``SentBytes``) and holds it to what the
all-to-all needs. And the functions must be the learner's own (``labkit.check_own_work``): ppdit's
swaps would pass every comparison.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

HERE = Path(__file__).parent
WORLD, B, H, HD = 3, 2, 6, 8
SPLIT = (4, 4, 3)  # uneven, earlier ranks first: no padding token ever enters attention
# Beside SPLIT, each run draws a token count and value seeds (hidden cases: no list to fit).
# SDPA over H/P heads against SDPA over all H: the same per-head arithmetic, but the CPU
# kernel may block its loops differently for another head count, so allow a few ulps.
ATTN_TOL = {"rtol": 1e-5, "atol": 1e-6}
# Bytes a swap may send beyond what its all-to-all needs: room for a few int64 of metadata (a
# shape, the split sizes) to each peer, and less than the smallest piece of real data a rank
# could send twice (one token of one rank's heads: B * H/P * hd * 4 = 128 bytes).
SLACK_BYTES = 64


# What one collective sends from this rank to the others, by op (after its namespace and
# underscores), at the least any algorithm for it can send: the data other ranks need from this
# one. ``x``: the bytes of its data argument, ``r``/``p``: this rank and the group's size.
def _a2a_single(a, r, p):
    x, splits = a["input"], a.get("input_split_sizes")
    own = splits[r] * (_nbytes(x) // x.shape[0]) if splits and x.shape[0] else _nbytes(x) // p
    return _nbytes(x) - own


def _scatter(a, r, p):
    pieces = a["input_tensors"]
    return _nbytes(pieces) - _nbytes(pieces[0][r]) if r == a["root_rank"] and pieces else 0


def _batch_p2p(a, r, p):
    return sum(_nbytes(t) for op, t in zip(a["op_list"], a["tensors"], strict=True) if "send" in op)


_SENDS = {
    **dict.fromkeys(["alltoall_base", "all_to_all_single"], _a2a_single),
    "alltoall": lambda a, r, p: _nbytes(a["input_tensors"]) - _nbytes(a["input_tensors"][r]),
    **dict.fromkeys(["allgather", "allgather_base", "allgather_coalesced",
                     "allgather_into_tensor_coalesced", "all_gather_into_tensor",
                     "all_gather_into_tensor_coalesced", "all_gather_into_tensor_out"],
                    lambda a, r, p: (p - 1) * _data(a)),  # the same data to every other rank
    **dict.fromkeys(["allreduce", "allreduce_coalesced", "all_reduce", "all_reduce_coalesced"],
                    lambda a, r, p: 2 * (p - 1) * _data(a) // p),  # reduce-scatter + all-gather
    **dict.fromkeys(["reduce_scatter", "reduce_scatter_base", "reduce_scatter_tensor",
                     "reduce_scatter_tensor_coalesced", "reduce_scatter_tensor_out"],
                    lambda a, r, p: (p - 1) * _data(a) // p),
    "broadcast": lambda a, r, p: (p - 1) * _data(a) if r == a.get("root_rank", a.get("src"))
    else 0,
    "scatter": _scatter,
    **dict.fromkeys(["gather", "reduce"], lambda a, r, p: 0 if r == a["root_rank"] else _data(a)),
    **dict.fromkeys(["send", "isend"], lambda a, r, p: _data(a)),
    "batch_p2p_ops": _batch_p2p,
    **dict.fromkeys(["recv", "recv_any_source", "irecv", "barrier", "monitored_barrier",
                     "wait_tensor", "wrap_tensor_autograd", "check_for_nan"],
                    lambda a, r, p: 0),
}
_COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional", "_c10d_functional_autograd",
                          "c10d_functional")
_DATA_ARGS = ("input", "input_tensor", "input_tensors", "inputs", "input_list", "shard",
              "tensors", "tensor", "self")


def _nbytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    return sum(_nbytes(y) for y in x) if isinstance(x, (list, tuple)) else 0


def _data(a) -> int:
    return _nbytes(next(a[name] for name in _DATA_ARGS if name in a))


def _rank_and_size(a) -> tuple[int, int]:
    """This rank's place in the op's group, and the group's size."""
    import torch.distributed as dist

    group = a.get("process_group")
    if isinstance(group, torch.ScriptObject):
        group = torch._C._distributed_c10d.ProcessGroup.unbox(group)
    elif isinstance(a.get("group_name"), str):
        group = torch._C._distributed_c10d._resolve_process_group(a["group_name"])
    elif "ranks" in a:  # the legacy c10d_functional ops name their ranks
        return list(a["ranks"]).index(dist.get_rank()), len(a["ranks"])
    else:
        return dist.get_rank(), dist.get_world_size()
    return group.rank(), group.size()


class SentBytes(TorchDispatchMode):
    """Bytes this rank sends to other ranks through collectives and P2P ops while active.

    Why a dispatch mode: every way PyTorch offers to move a tensor between ranks — the c10d
    calls (``dist.all_to_all``, ``all_to_all_single``, ``all_gather``,
    ``all_gather_into_tensor``, ``broadcast``, ``send``/``isend``/``irecv``,
    ``batch_isend_irecv``, the ``*_object`` ones), the functional collectives, gloo or NCCL —
    ends in a dispatcher op of ``c10d`` or ``_c10d_functional`` with its tensors as arguments,
    and a ``TorchDispatchMode`` sees each of them (checked on gloo, torch 2.13) without patching
    anything. Each op is charged what it must send at the least (``_SENDS``): an all-to-all its
    input less the piece it keeps, an all-gather its input once per other rank. An op of those
    namespaces missing from the table is recorded in ``uncounted`` (and run: a rank that stopped
    here would leave the others waiting in the collective).

    What it cannot see: data moved outside the dispatcher (the rendezvous store, a backend's
    methods called directly, collectives a tensor subclass issues inside its own dispatch). So
    the checker also asks for *at least* what the all-to-all needs: a correct swap cannot send
    less, so fewer bytes means the data went past the counter.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0
        self.ops: dict[str, int] = {}
        self.uncounted: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace in _COLLECTIVE_NAMESPACES:
            name = str(func.overloadpacket)
            try:
                names = [arg.name for arg in func._schema.arguments]
                a = dict(zip(names, args, strict=False)) | kwargs
                n = _SENDS[func.overloadpacket.__name__.strip("_")](a, *_rank_and_size(a))
            except Exception:  # not in the table, or arguments it does not expect
                self.uncounted.add(name)
            else:
                self.sent += n
                if n:
                    self.ops[name] = self.ops.get(name, 0) + n
        return func(*args, **kwargs)

    def report(self) -> dict:
        return {"sent": self.sent, "ops": dict(self.ops), "uncounted": sorted(self.uncounted)}


def a2a_needs(split: tuple[int, ...]) -> dict[str, list[int]]:
    """Bytes each rank must send other ranks in each function, by rank: ``seq_to_heads`` its
    slice (B, S_r, H, hd) less the heads it keeps; ``heads_to_seq`` its (B, S, H/P, hd) less
    its own tokens; ``ulysses_attention`` three of the first and one of the second."""
    row = B * (H // WORLD) * HD * torch.finfo(torch.float32).bits // 8  # a token of H/P heads
    to_heads = [(WORLD - 1) * s_r * row for s_r in split]
    to_seq = [(sum(split) - s_r) * row for s_r in split]
    return {"seq_to_heads": to_heads, "heads_to_seq": to_seq,
            "ulysses_attention": [3 * a + b for a, b in zip(to_heads, to_seq, strict=True)]}


def _full(seed: int, tokens: int) -> torch.Tensor:
    """A (B, S, H, hd) tensor every rank can rebuild: all tokens, all heads."""
    return torch.randn(B, tokens, H, HD, generator=torch.Generator().manual_seed(seed))


def mine(t: torch.Tensor, rank: int, split: tuple[int, ...]) -> torch.Tensor:
    """Rank ``rank``'s tokens, all heads."""
    start = sum(split[:rank])
    return t[:, start:start + split[rank]].contiguous()


def my_heads(t: torch.Tensor, rank: int) -> torch.Tensor:
    """All tokens, rank ``rank``'s heads."""
    hp = H // WORLD
    return t[:, :, rank * hp:(rank + 1) * hp].contiguous()


def a2a_worker(ctx, impl_path: str, split: tuple[int, ...], seeds: tuple[int, ...]
               ) -> dict[str, torch.Tensor]:
    """On every rank: run the student's swaps and attention on this rank's slices."""
    import torch.distributed as dist

    from ppdit.teaching.labkit import check_own_work, load_module

    impl, r, group = load_module(impl_path), ctx.rank, dist.group.WORLD
    check_own_work(impl, "lab 05")  # guards the functions this rank runs, too
    q, k, v, y = (_full(seed, sum(split)) for seed in seeds)
    out, sent = {}, {}
    with SentBytes() as count:
        out["to_heads"] = impl.seq_to_heads(mine(q, r, split), split, group, r)
    sent["seq_to_heads"] = count.report()
    with SentBytes() as count:
        out["to_seq"] = impl.heads_to_seq(my_heads(y, r), split, group, r)
    sent["heads_to_seq"] = count.report()
    with SentBytes() as count:
        out["attention"] = impl.ulysses_attention(mine(q, r, split), mine(k, r, split),
                                                  mine(v, r, split), split, group, r)
    sent["ulysses_attention"] = count.report()
    return out | {"sent": sent}


def check_bytes(r: int, name: str, report: dict, need: int, swaps: int) -> None:
    """What rank ``r`` sent in ``name`` against what its ``swaps`` all-to-alls need."""
    sent, ops = report["sent"], ", ".join(f"{op}: {n}" for op, n in report["ops"].items())
    assert not report["uncounted"], (
        f"rank {r}: {name} used {', '.join(report['uncounted'])}, whose bytes the checker "
        "cannot count: move the data with funcol.all_to_all_single")
    assert sent <= need + swaps * SLACK_BYTES, (
        f"rank {r}: {name} sent {sent} bytes to other ranks ({ops}), but its all-to-all"
        f"{'s' if swaps > 1 else ''} need{'' if swaps > 1 else 's'} only {need} bytes: each "
        "rank sends every other rank just the piece it needs (an all-gather sends a rank's "
        "whole slice to every rank, P times the bytes; pieces padded to one size send the "
        "padding too, and all_to_all_single takes split sizes)")
    assert sent >= need, (
        f"rank {r}: {name} sent {sent} bytes through the collectives the checker can see "
        f"({ops or 'none'}), fewer than the {need} bytes the other ranks need from it: move "
        "the data with funcol.all_to_all_single (or torch.distributed's collectives)")


def check(impl, pool=None) -> None:
    """3 real gloo ranks: swaps bit for bit, attention to ``ATTN_TOL`` against one device, and
    every function sending what its all-to-alls need (``check_bytes``), no more, no less; on
    ``SPLIT``, then on a token count and values drawn at this run. ``pool``: live ranks to
    reuse (the test suite's); a student's run starts fresh ones. ppdit's own swaps
    (``ppdit.parallel.sequence.comms``) would pass all of it, so the file may not use them."""
    from ppdit.parallel.sequence.comms import even_split
    from ppdit.teaching.labkit import check_own_work, hidden_cases

    check_own_work(impl, "lab 05")  # here, before any rank starts: a refusal costs nothing
    try:
        _check_split(impl, SPLIT, tuple(range(4)), pool)
    except AssertionError as err:
        err.add_note(f"(on split {SPLIT})")
        raise
    with hidden_cases() as rng:
        drawn = tuple(even_split(rng.randint(WORLD, 17), WORLD))
        _check_split(impl, drawn, tuple(rng.randrange(10_000) for _ in range(4)), pool)


def _check_split(impl, split: tuple[int, ...], seeds: tuple[int, ...], pool) -> None:
    from ppdit.teaching.labkit import run_on_ranks

    outs = run_on_ranks(a2a_worker, WORLD, "lab 05", (impl.__file__, split, seeds), pool)
    q, k, v, y = (_full(seed, sum(split)) for seed in seeds)
    attention = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)))
    attention = attention.transpose(1, 2)  # (B, S, H, hd) on one device
    for r, out in enumerate(outs):
        got, want = out["to_heads"], my_heads(q, r)
        assert got.shape == want.shape, f"rank {r}: seq_to_heads gave {tuple(got.shape)}, " \
            f"expected (B, S, H/P, hd) = {tuple(want.shape)}"
        assert torch.equal(got, want), (f"rank {r}: seq_to_heads moved the right amount of data "
                                        "but not the right numbers: check which piece goes to "
                                        "which rank, and the order of tokens and heads in it")
        got, want = out["to_seq"], mine(y, r, split)
        assert got.shape == want.shape, f"rank {r}: heads_to_seq gave {tuple(got.shape)}, " \
            f"expected (B, S_r, H, hd) = {tuple(want.shape)}"
        assert torch.equal(got, want), f"rank {r}: heads_to_seq does not invert the layout swap"
        torch.testing.assert_close(out["attention"], mine(attention, r, split), **ATTN_TOL,
                                   msg=lambda m, r=r: f"rank {r}: ulysses_attention: {m}")
    needs = a2a_needs(split)
    for r, out in enumerate(outs):
        for name, swaps in (("seq_to_heads", 1), ("heads_to_seq", 1), ("ulysses_attention", 4)):
            check_bytes(r, name, out["sent"][name], needs[name][r], swaps)


def test_lab05():
    from ppdit.teaching.labkit import lab_implementation

    check(lab_implementation(HERE / "lab05_ulysses.py"))
