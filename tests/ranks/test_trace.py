"""``collectives_into`` on a real process group (one rank: a unit test may not make a group):
eager all-reduces of every style become collective spans, and none outside it."""

from __future__ import annotations

from ppdit.runtime.observe.trace import Tracer


def test_collectives_into_records_eager_all_reduces(tmp_path):
    import torch
    import torch.distributed as dist

    from ppdit.parallel.tensor.layers import all_reduce_sum
    from ppdit.runtime.observe.trace import collectives_into

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        tracer = Tracer()
        all_reduce_sum(torch.ones(3), dist.group.WORLD, "c10d")  # outside: nothing recorded
        with collectives_into(tracer):
            for style in ("funcol", "c10d", "c10d_async"):
                out = all_reduce_sum(torch.ones(3), dist.group.WORLD, style)
                assert torch.equal(out, torch.ones(3))
    finally:
        dist.destroy_process_group()
    assert [(s.kind, s.name) for s in tracer.finish().spans] == [("collective", "all-reduce")] * 3
