"""What the GPU tests of every lane share: the skip mark for a machine without CUDA, and the
committed GPU run (issue 14's H100 report) the gpu-check tests read."""

from __future__ import annotations

import pytest
import torch

from ppdit.analysis.gpu_runs import GPU_RUNS

COMMITTED = GPU_RUNS / "h100-issue14-report.json"

needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA GPU; without one, the tests beside it check the CPU path of the same code")
