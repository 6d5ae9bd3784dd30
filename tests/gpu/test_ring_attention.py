"""Ring attention's CUDA kernels (``ring.attend_with_lse``: FlashAttention-2 in bf16, the
memory-efficient kernel in fp32) against the textbook arithmetic, and the real ring loop's
peak on the GPU against the memory model. Skipped without a GPU; the CPU kernel and the CPU
peak are checked in tests/unit (test_sequence_parallel.py, test_memory_model.py)."""

from __future__ import annotations

import pytest
import torch

from ppdit.analysis.memory_model import ring_attention_peak_bytes
from ppdit.analysis.roofline import latent_for
from ppdit.model import torch_dtype
from ppdit.parallel.sequence.ring import attend_with_lse, ring_attention
from ppdit.presets import get_preset
from ppdit.runtime.device import Placement
from ppdit.runtime.observe.memory import track_peak_memory
from tests.conftest import MODEL_TOL
from tests.support.gpu import needs_cuda
from tests.support.ring import loopback_ring, softmax_attention

pytestmark = [pytest.mark.gpu, needs_cuda]

# bf16: flash rounds the softmax probabilities and the output to bf16 (8 mantissa bits, 4e-3
# relative), so 2e-2 as torchtitan's bf16 TOL. fp32: the memory-efficient kernel's matmuls are
# 3xTF32 on sm80+ (CUTLASS's OpMultiplyAddFastF32, ~1e-6 relative) summed in another order
# than the reference's; 1e-4 leaves two orders of margin.
CUDA_TOL = {torch.bfloat16: {"rtol": 2e-2, "atol": 2e-2},
            torch.float32: {"rtol": 1e-4, "atol": 1e-4}}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("s_q, s_k", [(45, 37), (130, 200)])  # not multiples of 32 queries
def test_cuda_attend_with_lse_equals_softmax_attention(dtype, s_q, s_k):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, s_q, 4, 64, generator=g).to(dtype)
    k, v = (torch.randn(2, s_k, 4, 64, generator=g).to(dtype) for _ in range(2))
    out, lse = attend_with_lse(q.cuda(), k.cuda(), v.cuda())
    ref_out, ref_lse = softmax_attention(q, k, v)  # fp32 on the CPU, from the same values
    assert out.dtype == lse.dtype == torch.float32 and lse.shape == (2, 4, s_q)
    torch.testing.assert_close(out.cpu(), ref_out, **CUDA_TOL[dtype])
    torch.testing.assert_close(lse.cpu(), ref_lse, **CUDA_TOL[dtype])


@pytest.mark.parametrize("degree, dtype", [(2, "bf16"), (3, "bf16"), (3, "fp32")])
def test_cuda_ring_attention_peak_within_15_percent_of_the_model(degree, dtype):
    """The real loop (hops looped back) on the tiny preset at 480p x 81 frames: the kernels
    keep no S x S buffer, so the caching allocator's peak is the model's O(S) count."""
    p, placement = get_preset("tiny"), Placement(torch.device("cuda", 0), "nccl")
    s = p.num_tokens(latent_for("480p")) // degree
    with track_peak_memory(placement) as mem:
        q, k, v = (torch.randn(1, s, p.num_heads, p.head_dim, device=placement.device,
                               dtype=torch_dtype(dtype)) for _ in range(3))
        ring_attention(q, k, v, loopback_ring(degree, s, placement.device))
    predicted = ring_attention_peak_bytes(p, degree, "480p", dtype=dtype)
    assert abs(predicted / mem.peak_bytes - 1) < MODEL_TOL, (predicted, mem.peak_bytes)
