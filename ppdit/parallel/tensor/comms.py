"""What tensor parallelism costs in communication, computed and measured, and in graph breaks.

Computed (``tp_comm_per_block``): per block, Wan under TP issues

    3 all-reduces of (B, S, D) activations   self-attn out, cross-attn out, FFN out
    4 all-reduces of per-token sums (fp32)   q and k norms: (B,S,1) x 3 and (B,L,1) for text k

so 7 all-reduces and ``3 B S D b + 4 (3 B S + B L)`` payload bytes, ``b`` bytes per activation.
A ring all-reduce sends ``2 (tp - 1) / tp`` times the payload from every rank, towards twice it
as tp grows, while each rank's compute shrinks as 1/tp: the reason TP stays inside a node.

Measured: ``CollectiveCounter`` eagerly (as PyTorch's fuller ``CommDebugMode`` does);
``trace_report``, graph breaks and the ATen all-reduce nodes a compiled run issues.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

NORM_SUM_BYTES = 4  # DistributedRMSNorm reduces fp32 sums of squares, whatever the model dtype
# Op names (after the namespace) of collectives, functional and in-place; waits and wrappers are
# not collectives and are left out.
COLLECTIVE_OPS = frozenset({"all_reduce", "all_reduce_", "allreduce_", "all_gather_into_tensor",
                            "allgather_", "reduce_scatter_tensor", "reduce_scatter_",
                            "broadcast", "broadcast_", "all_to_all_single", "alltoall_"})


@dataclass(frozen=True)
class BlockComm:
    """Communication of one Wan block under TP (all-reduces; ring algorithm for wire bytes)."""

    all_reduces: int  # collectives per block (0 without TP)
    payload_bytes: int  # sum of the sizes of the reduced tensors
    activation_bytes: int  # of which the three (B, S, D) activation all-reduces
    wire_bytes_per_rank: float  # what each rank sends: 2 (tp-1)/tp x payload for a ring

    def per_forward(self, num_blocks: int) -> BlockComm:
        """The same for ``num_blocks`` blocks (a whole forward)."""
        return BlockComm(self.all_reduces * num_blocks, self.payload_bytes * num_blocks,
                         self.activation_bytes * num_blocks, self.wire_bytes_per_rank * num_blocks)


def tp_comm_per_block(*, batch: int, tokens: int, text_len: int, dim: int, tp: int,
                      bytes_per_element: int = 4) -> BlockComm:
    """The formula in the module docstring. ``tokens`` is S, ``text_len`` L, ``dim`` D."""
    if tp == 1:
        return BlockComm(0, 0, 0, 0.0)
    act = 3 * batch * tokens * dim * bytes_per_element
    sums = (3 * batch * tokens + batch * text_len) * NORM_SUM_BYTES
    payload = act + sums
    return BlockComm(7, payload, act, 2 * (tp - 1) / tp * payload)


class CollectiveCounter(TorchDispatchMode):
    """Counts collective ops (and their input bytes) dispatched while active, by op name: every
    functional, in-place and DTensor collective, eagerly only. Usage:
    ``with CollectiveCounter() as c: model(...)``; then ``c.count``, ``c.bytes``."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}
        self.nbytes: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)  # e.g. "_c10d_functional.all_reduce"
        if name.split(".")[-1] in COLLECTIVE_OPS:
            tensors = [a for a in tree_leaves(args) if isinstance(a, torch.Tensor)]
            self.counts[name] = self.counts.get(name, 0) + 1
            self.nbytes[name] = self.nbytes.get(name, 0) + sum(
                t.numel() * t.element_size() for t in tensors)
        return func(*args, **(kwargs or {}))

    @property
    def count(self) -> int:
        """Collectives seen, all kinds."""
        return sum(self.counts.values())

    @property
    def bytes(self) -> int:
        """Payload bytes of the collectives seen."""
        return sum(self.nbytes.values())


@dataclass
class TraceReport:
    """What Dynamo made of a function: graphs, breaks (distinct reasons), graphs' collectives."""

    graph_count: int
    graph_break_count: int
    break_reasons: list[str]  # distinct first lines of the reasons
    graph_all_reduces: int | None = None  # all_reduce nodes in the ATen graphs (None: not asked)
    graph_all_reduce_bytes: int | None = None  # their input sizes, from the traced values


def trace_report(fn: Callable, *args, collectives: bool | str = True) -> TraceReport:
    """Graph breaks of ``fn(*args)`` from ``torch._dynamo.explain``, and (``collectives``) the
    all-reduces inside its compiled graphs. No Inductor compile: seconds, not tens of seconds.
    ``collectives="if_whole"`` counts them only when ``fn`` traced as one graph: a function
    broken into many graphs costs an AOT trace per graph (``graph_all_reduces`` stays None).
    ``graph_break_count`` counts breaks met while compiling, not per call: code Dynamo already
    compiled (the second of two identical blocks) adds none. The all-reduces are counted in
    AOTAutograd's ATen graphs, where DTensor's redistributions show as collectives; those left
    outside (at graph breaks) run eagerly, uncounted. ``fn`` runs (once or twice): on ranks, call it
    on every rank of the group."""
    torch._dynamo.reset()
    try:
        ex = torch._dynamo.explain(fn)(*args)
        reasons = [str(r.reason).strip().splitlines()[0] for r in ex.break_reasons]
        report = TraceReport(ex.graph_count, ex.graph_break_count, list(dict.fromkeys(reasons)))
        torch._dynamo.reset()
        if collectives is True or (collectives == "if_whole" and ex.graph_break_count == 0):
            report.graph_all_reduces, report.graph_all_reduce_bytes = _aten_all_reduces(fn, *args)
    finally:
        torch._dynamo.reset()
    return report


def _aten_all_reduces(fn: Callable, *args) -> tuple[int, int]:
    """The all_reduce nodes (and their input bytes) of ``fn``'s AOTAutograd forward graphs."""
    # AOTAutograd's modules are heavy to import and only tracing needs them.
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    torch.compile(fn, backend=aot_autograd(fw_compiler=keep))(*args)
    n, nbytes = 0, 0
    for gm in graphs:
        for node in gm.graph.nodes:
            if node.op == "call_function" and "all_reduce" in str(node.target):
                n += 1
                val = node.args[0].meta.get("val")
                nbytes += val.numel() * val.element_size()
    return n, nbytes
