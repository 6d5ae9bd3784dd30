"""Each rank keeps 1/P of every block's weights; a block's are all-gathered just before it runs
and freed after it, the next block's gather posted early (PyTorch's FSDP2, for inference).

Wan's own multi-GPU recipe (``--dit_fsdp`` beside Ulysses) does this: the ranks that split
the tokens also split the weights, so a 14B DiT (28.6 GB in bf16) needs 28.6 / P GB per GPU
plus one or two blocks gathered at a time. The blocks hold nearly all the weights; the
embedders and the output head at the root are small and stay whole on every rank (the stage
functions call them outside the root module, where FSDP's root hooks would not run).

The all-gather rebuilds the exact weights, so the forward is one device's bit for bit. What it
costs: every block's weights cross the link once per forward (the whole model per forward), in
the open unless hidden behind the previous block's compute, which the prefetch is for.
"""

from __future__ import annotations

import itertools

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

from ppdit.runtime.observe.timing import now_ns
from ppdit.runtime.observe.trace import Tracer


def shard_blocks(model, group, device_type: str, materialized: bool = True) -> None:
    """Shard every transformer block of ``model`` over ``group`` (in place). A model on the
    meta device (``materialized=False``) calls ``ready`` once its shards hold their values.

    Frozen first: FSDP2 asks that a block's *trainable* parameters share one dtype, and a Wan
    checkpoint in bf16 keeps some modules in fp32 (``norm2``, ``scale_shift_table``); frozen
    ones may differ, and inference trains nothing."""
    model.requires_grad_(False)
    mesh = DeviceMesh.from_group(group if group is not None else dist.group.WORLD, device_type)
    blocks = list(model.blocks)
    for block in blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=True)
    for block, nxt in itertools.pairwise(blocks):  # block i + 1's all-gather posted at block i
        block.set_modules_to_forward_prefetch([nxt])
    if materialized:
        ready(model)


def ready(model) -> None:
    """Set up every block's FSDP state now. Every block is an FSDP root of its own (the stage
    functions call the blocks, never the model's forward), and a root sets itself up at its
    first forward: too late for the block before it to prefetch it (FSDP2's private lazy
    init, which also checks that no shard is left on the meta device)."""
    for block in model.blocks:
        block._get_fsdp_state()._lazy_init()


GATHER_PREFIX = "all-gather"  # the names of the spans trace_gathers draws start with it


def trace_gathers(model, tracer: Tracer) -> list:
    """Draw each sharded block's gathers on ``tracer``; the hooks' handles (remove after use).
    Three hooks per block, around FSDP's own pre-forward (which waits for this block's all-gather,
    then posts the next block's: the prefetch):

    * ``wait``    from before FSDP's pre-forward until the block's weights are whole: the part of
                  the gather the previous block's compute did not hide;
    * ``compute`` the block itself, named "block i";
    * ``send``    (drawn thin, beside the compute) the next block's gather, from its posting until
                  its block found it: the part that travels behind compute.

    The stamps are when the host reached each point (``now_ns``): on CPU ranks when the work ran,
    on a GPU the order the host issued it in (kernels run later): read a GPU run's overlap in a
    ``torch.profiler`` trace, not here."""
    marks: dict[str, int] = {}
    handles = []
    last = len(model.blocks) - 1
    for i, block in enumerate(model.blocks):
        def before(module, args, i=i):
            marks["asked"] = now_ns()

        def whole(module, args, i=i):
            now = now_ns()
            tracer.record("wait", f"{GATHER_PREFIX} block {i}: waited", marks["asked"], now)
            if "posted" in marks:  # posted by the previous block's pre-forward
                tracer.record("gather", f"{GATHER_PREFIX} block {i}: in flight",
                              marks.pop("posted"), now)
            marks["start"] = now
            if i < last:  # the last block prefetches nothing
                marks["posted"] = now

        def done(module, args, output, i=i):
            tracer.record("compute", f"block {i}", marks["start"], now_ns())

        handles += [block.register_forward_pre_hook(before, prepend=True),
                    block.register_forward_pre_hook(whole),
                    block.register_forward_hook(done)]
    return handles
