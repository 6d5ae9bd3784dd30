"""Tensor parallelism without ranks: the degree rules, the mesh's rank layout, the
communication formula (by hand and against the roofline), the split RMS norm's exchanged sum.
The TP ranks themselves (equal to one device, compiled, sharded, PP x TP) are in
tests/ranks/test_tensor_parallel.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from ppdit.model import build_model
from ppdit.parallel.layout import Layout, check_tp_degree
from ppdit.parallel.step_split.plan import make_plan
from ppdit.parallel.tensor.comms import tp_comm_per_block
from ppdit.parallel.tensor.layers import split_rms_norm
from ppdit.presets import get_preset
from ppdit.runtime.comm.mesh import Mesh
from ppdit.sampler import SamplingConfig
from tests.support.tp_workers import TINY, V, tiny_tp_comm


def test_heads_must_divide_by_tp():
    with pytest.raises(ValueError, match=r"num_heads=4 .*tp=3.*4 % 3 = 1"):
        check_tp_degree(build_model("tiny", device="meta").config, 3)


def test_ffn_dim_must_divide_by_tp():
    with pytest.raises(ValueError, match=r"ffn_dim=130 .*tp=4.*130 % 4 = 2"):
        check_tp_degree(SimpleNamespace(num_attention_heads=8, ffn_dim=130), 4)


def test_the_mesh_lays_ranks_out_by_axis_innermost_last():
    """step x tp after a controller rank: TP groups are consecutive ranks, a stage's
    counterparts a TP degree apart (``runtime.comm.mesh``; no process group needed)."""
    mesh = Mesh.of(first_rank=1, dp=1, step=2, tp=2)
    assert mesh.world_size == 5 and mesh.coords(0) is None
    assert mesh.coords(4) == {"dp": 0, "step": 1, "tp": 1}
    assert mesh.rank_of({"dp": 0, "step": 1, "tp": 0}) == 3
    assert mesh.line(4, ("tp",)) == [3, 4] and mesh.line(4, ("step",)) == [2, 4]
    assert mesh.lines(("step",)) == [[1, 3], [2, 4]]
    layout = Layout(step=2, cfg=2, ulysses=2).mesh()
    assert layout.line(0, ("cfg",)) == [0, 2] and layout.line(0, ("step",)) == [0, 4]
    with pytest.raises(ValueError, match="names must differ and sizes be >= 1"):
        Mesh((("tp", 2), ("tp", 0)))
    with pytest.raises(ValueError, match="num_heads=4"):
        make_plan(1, 2, stage=Layout(tp=3), sampling=SamplingConfig(num_steps=4))


def test_comm_formula():
    c = tiny_tp_comm(2)
    s, d, ell = TINY.num_tokens(), TINY.dim, TINY.text_len
    assert c.all_reduces == 7
    assert c.activation_bytes == 3 * s * d * 4
    assert c.payload_bytes == 3 * s * d * 4 + (3 * s + ell) * 4
    assert c.wire_bytes_per_rank == c.payload_bytes  # 2 (tp-1)/tp = 1 at tp = 2
    assert tiny_tp_comm(4).wire_bytes_per_rank == 1.5 * c.payload_bytes
    assert tiny_tp_comm(1).all_reduces == 0
    assert c.per_forward(4).all_reduces == 28


def test_comm_formula_agrees_with_the_roofline():
    from ppdit.analysis.roofline import tp_allreduce_bytes

    for name in ("tiny", "wan2.1-14b"):
        p = get_preset(name)
        c = tp_comm_per_block(batch=1, tokens=p.num_tokens(), text_len=p.text_len, dim=p.dim,
                              tp=2, bytes_per_element=2)
        assert c.payload_bytes == tp_allreduce_bytes(name, dtype="bf16")


def test_split_rms_norm_needs_the_exchanged_sum(tiny):
    norm = tiny.blocks[0].attn1.norm_q
    x = torch.randn(2, 7, TINY.dim, generator=torch.Generator().manual_seed(0)) * 3
    x[..., : TINY.dim // 2] *= 10  # heads of different loudness: local RMS != global RMS
    full = norm(x)
    for tp in (2, 4):
        torch.testing.assert_close(split_rms_norm(x, norm, tp), full, rtol=1e-5, atol=1e-5)
        assert (split_rms_norm(x, norm, tp, exchange=False) - full).abs().max() > 0.1


def test_async_c10d_cannot_compile_fullgraph():
    with pytest.raises(ValueError, match="graph break"):
        V("c10d_async", compiled=True)
