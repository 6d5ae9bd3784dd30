"""The unknowns of ``make gpu-check`` (``ppdit.gpu_check.unknowns``) as GPU tests, small: a
posted NCCL receive under a stream vs a device-wide sync (2 GPUs), and the served ring on CUDA
against plain attention and the memory model. Their CPU code paths are checked in
tests/unit and tests/system (test_gpu_check.py); the sections measure them at full size."""

from __future__ import annotations

import pytest
import torch

from ppdit.gpu_check.unknowns import ring_memory, sync_probe
from ppdit.runtime.device import Placement
from tests.conftest import MODEL_TOL
from tests.support.gpu import needs_cuda

pytestmark = [pytest.mark.gpu, needs_cuda]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs: a posted receive is "
                    "an NCCL kernel only with a GPU per rank (ranks sharing one use gloo)")
def test_a_posted_nccl_receive_holds_a_device_sync_not_a_stream_sync():
    """What ``Placement.synchronize`` and ``nccl_rules.device_sync`` assume, on the hardware."""
    got = sync_probe("cuda", delay_s=2.0)
    assert got["backend"] == "nccl"
    assert got["as_modelled"], got


def test_served_ring_on_cuda_equals_plain_attention_at_the_models_peak():
    """The tiny preset at 480p x 81 frames (32,760 tokens), bf16: every rank's ring on one GPU
    within test_ring_attention's bf16 tolerance of flash attention, its peak the model's."""
    got = ring_memory(Placement(torch.device("cuda", 0), "nccl"), ("tiny",))
    [row] = got["rows"]
    assert row["max_abs_diff"] < 2e-2
    assert abs(row["ratio"] - 1) < MODEL_TOL, row
