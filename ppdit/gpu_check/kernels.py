"""This GPU's practical ceilings (a big bf16 matmul, a device copy) and what a CUDA graph saves
per denoising step.

The ceilings are the roofline's two numbers as this card reaches them, next to the datasheet's:
``forwards`` uses them for a second lower bound (``ppdit.analysis.gpu_runs.ceiling_bound_ms``).
The graph figures are ``ppdit.analysis.overhead.eager_vs_graph_ms`` on the ``tiny`` and ``small``
presets, where a step is short enough that issuing its kernels, not computing them, sets its
time (notebook 08).
"""

from __future__ import annotations

import torch

from ppdit.analysis.measure import best_time
from ppdit.analysis.overhead import eager_vs_graph_ms
from ppdit.gpu_check.sections import sig
from ppdit.model import build_model
from ppdit.presets import get_preset
from ppdit.runtime.device import Placement

MATMUL_N = 8192  # (n, n) @ (n, n) in bf16: 1.1 TFLOP, big enough to saturate the tensor cores
COPY_GB = 1.0  # per buffer: far larger than any GPU cache
CALLS = 10  # kernels per call of the timed function
GRAPH_PRESETS = ("tiny", "small")
GRAPH_STEPS = 20


def device_ceilings(placement: Placement, n: int = MATMUL_N, copy_gb: float = COPY_GB) -> dict:
    """bf16 matmul TFLOP/s and copy TB/s, each the best of 5 runs of ~0.2 s."""
    return {"matmul_tflops": sig(matmul_tflops(placement, n), 3), "matmul_n": n,
            "matmul_dtype": "bf16", "copy_tb_s": sig(copy_tb_s(placement, copy_gb), 3),
            "copy_gb": copy_gb}


def matmul_tflops(placement: Placement, n: int = MATMUL_N) -> float:
    """TFLOP/s of an (n, n) @ (n, n) bf16 matmul, 2 n^3 FLOPs each."""
    a, b = (torch.randn(n, n, device=placement.device, dtype=torch.bfloat16) for _ in range(2))
    c = torch.empty_like(a)
    return _per_second(2 * n**3, lambda: torch.mm(a, b, out=c), placement) / 1e12


def copy_tb_s(placement: Placement, gb: float = COPY_GB) -> float:
    """TB/s of ``dst.copy_(src)`` on fp32 buffers of ``gb`` GB, counting one read and one
    write per byte (as ``ppdit.analysis.measure.measure_copy_bandwidth`` does on the CPU)."""
    src = torch.ones(int(gb * 1e9) // 4, device=placement.device)
    dst = torch.empty_like(src)
    return _per_second(2 * src.numel() * 4, lambda: dst.copy_(src), placement) / 1e12


def _per_second(work: float, kernel, placement: Placement) -> float:
    """``work`` (FLOPs or bytes) per second of ``kernel``, timed ``CALLS`` kernels at a time."""
    def calls():
        for _ in range(CALLS):
            kernel()

    return work / (best_time(calls, 0.2, 5, placement) / CALLS)


def graph_replay(placement: Placement, presets: tuple[str, ...] = GRAPH_PRESETS,
                 steps: int = GRAPH_STEPS) -> dict:
    """Eager ``Denoiser.step`` vs a replayed ``StepGraph``, ms per step, per preset (fp32, the
    presets' default latents, batch 1, no guidance)."""
    rows = []
    for name in presets:
        model = build_model(name, seed=0, device=placement.device)
        shape = get_preset(name).latent_shape
        r = eager_vs_graph_ms(model, preset=name, latent_shape=shape, placement=placement,
                              steps=steps)
        rows.append({"preset": name, "context": "Denoiser.step vs StepGraph replay",
                     "latent_shape": list(shape), "steps": steps, "eager_ms": sig(r["eager_ms"]),
                     "graph_ms": sig(r["graph_ms"]), "speedup": sig(r["speedup"], 3)})
        del model
    return {"rows": rows}
