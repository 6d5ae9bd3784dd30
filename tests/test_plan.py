"""``ppdit plan``: a composed layout's weights per GPU and step bound, before anything runs."""

from __future__ import annotations

import pytest

from ppdit import cli
from ppdit.analysis.hardware import Layout
from ppdit.analysis.plan import hardware_layout, plan_rows


def test_fsdp_beside_ulysses_fits_14b_where_one_gpu_does_not():
    """Wan 2.1-14B's 28.6 GB of bf16 weights do not fit a 24 GB RTX 4090; sharded over 4 GPUs
    beside Ulysses each holds the root, a quarter of the blocks and two gathered blocks."""
    one, *layout = plan_rows("wan2.1-14b", "RTX 4090", "ulysses=4,fsdp=4")
    assert not one.fits and all(r.fits for r in layout)
    assert all(one.weights_gb / 4 < r.weights_gb < one.weights_gb / 3 for r in layout)
    plain = plan_rows("wan2.1-14b", "RTX 4090", "ulysses=4")[1]
    assert all(r.comm_s > plain.comm_s for r in layout)  # the gathers cross the link


def test_layouts_map_to_the_roofline():
    assert hardware_layout("pp_tp", 4) == Layout(tp=2, pp=2, split="step")
    assert hardware_layout("layer", 4) == Layout(pp=4, split="layer")
    assert hardware_layout("cfg=2,ulysses=2,ring=2,fsdp=8") == Layout(ulysses=2, ring=2, cfg=2,
                                                                       fsdp=True)


def test_cli_plan_prints_the_verdict_and_refuses_bad_layouts(capsys):
    assert cli.main(["plan", "--layout", "cfg=2,ulysses=4,fsdp=8", "--link", "NVLink 4"]) == 0
    out = capsys.readouterr().out
    assert "needs 5.4 GB of weights per GPU (fits in the H100 SXM's 80 GB)" in out
    assert cli.main(["plan", "--model", "wan2.1-1.3b", "--layout", "ulysses=8"]) == 2
    assert "Ulysses degree 8 must divide the 12 heads" in capsys.readouterr().err
    with pytest.raises(ValueError, match="gpu='B200' is not one of"):
        plan_rows("wan2.1-14b", "B200", "ulysses=2")
