"""One forward of the real Wan 2.1 transformers at 480p on one GPU, against the roofline bound.

The models are the 1.3B and 14B configurations with random weights, built *directly on the GPU
in bf16*: the 14B's fp32 weights would take 57 GB of host memory and minutes to draw on the
CPU, and its bf16 ones 28.6 GB of GPU memory. The modules diffusers keeps in fp32 (rope, time
embedder, norms, ``scale_shift_table``) are put back in fp32, as ``from_pretrained(torch_dtype=
torch.bfloat16)`` would leave them. Inputs: the 480p latent (1, 16, 21, 60, 104), 32,760 tokens,
and a 512-token text, both bf16, one timestep; no guidance (one forward, not a step).

Two lower bounds beside each measurement (``ppdit.analysis.hardware``):
``bound_ms`` with the datasheet's ceilings, where this GPU has a row in the hardware table, and
``ceiling_bound_ms`` with the ceilings this GPU actually reached (``kernels.device_ceilings``).
"""

from __future__ import annotations

import traceback

import torch
from diffusers import WanTransformer3DModel

from ppdit.analysis.gpu_run_schema import FORWARDS
from ppdit.analysis.gpu_runs import ceiling_bound_ms
from ppdit.analysis.hardware import predict
from ppdit.analysis.memory_model import rank_memory_model
from ppdit.analysis.roofline import DTYPE_BYTES, model_ops, totals
from ppdit.gpu_check.sections import first_line, free_gb, release, sig
from ppdit.presets import get_preset
from ppdit.runtime.device import Placement
from ppdit.runtime.observe.memory import track_peak_memory
from ppdit.runtime.observe.timing import repeat

MODELS = ("wan2.1-1.3b", "wan2.1-14b")
# Activations of one 480p forward (h, q, k, v, the FFN's hidden units: under 3 GB for the 14B)
# plus the allocator's slack: what must be free beyond the weights before a model is built.
HEADROOM_GB = 8.0
REPEATS = 3  # timed forwards after one warm-up; the median is reported

# Device names as CUDA reports them -> rows of ppdit.analysis.hardware.GPUS. Only exact parts:
# an H100 PCIe or NVL has other peaks than the SXM, so it gets no datasheet bound.
DATASHEET_ROWS = {"NVIDIA H100 80GB HBM3": "H100 SXM", "NVIDIA H200": "H200 SXM",
                  "NVIDIA GeForce RTX 4090": "RTX 4090", "NVIDIA RTX A5000": "RTX A5000"}


def datasheet_row(device_name: str) -> str | None:
    """The hardware table's row for a CUDA device name, or ``None`` if it has none."""
    return DATASHEET_ROWS.get(device_name.strip())


def weights_gb(model: str, dtype: str = "bf16") -> float:
    """GB of the weights the roofline counts (linear and conv weights) in ``dtype``."""
    return totals(model_ops(model, dtype=dtype)).weights * DTYPE_BYTES[dtype] / 1e9


def build_direct(model: str, device: torch.device | str, dtype: torch.dtype = torch.bfloat16,
                 seed: int = 0) -> WanTransformer3DModel:
    """A preset's transformer with random weights drawn on ``device`` in ``dtype``, its
    fp32-kept modules back in fp32 (see the module docstring). Not identical to
    ``ppdit.model.build_model``'s weights: those are drawn on the CPU in fp32."""
    config, old = get_preset(model).diffusers_config(), torch.get_default_dtype()
    with torch.random.fork_rng(devices=[device] if torch.device(device).type == "cuda" else []):
        torch.manual_seed(seed)
        torch.set_default_dtype(dtype)
        try:
            with torch.device(device):
                net = WanTransformer3DModel(**config)
        finally:
            torch.set_default_dtype(old)
    keep = set(net._keep_in_fp32_modules)
    for name, tensor in [*net.named_parameters(), *net.named_buffers()]:
        if keep & set(name.split(".")):
            tensor.data = tensor.data.float()
    return net.eval().requires_grad_(False)


def wan_forwards(placement: Placement, ceilings: dict | None = None,
                 models: tuple[str, ...] = MODELS) -> dict:
    """One row per model. A model that is skipped (memory) or fails leaves its reason in its
    row and the section "partial"; the others are still measured."""
    rows = [forward_row(m, placement, ceilings) for m in models]
    statuses = {r["status"] for r in rows}
    if statuses == {"ok"}:
        return {"rows": rows}
    reasons = "; ".join(f"{r['model']}: {r['reason']}" for r in rows if r["status"] != "ok")
    status = "partial" if "ok" in statuses else "error" if "error" in statuses else "skipped"
    return {"rows": rows, "status": status, "reason": reasons}


def forward_row(model: str, placement: Placement, ceilings: dict | None) -> dict:
    """Measure one model (or say why not) and put its bounds beside it."""
    p = get_preset(model)
    shape = p.latent_shape
    # every field of the schema's row, in its order: null until measured
    row = {**dict.fromkeys(FORWARDS["rows"][0]), "model": model, "dtype": "bf16",
           "latent_shape": list(shape), "tokens": p.num_tokens(shape), "status": "ok"}
    need, free = weights_gb(model) + HEADROOM_GB, free_gb()
    if free < need:
        return {**row, "status": "skipped",
                "reason": f"needs about {need:.0f} GB of free GPU memory ({weights_gb(model):.1f}"
                          f" GB of bf16 weights + {HEADROOM_GB:.0f} GB for activations); "
                          f"{free:.1f} GB free"}
    try:
        ms, peak = _time_forward(model, placement)
    except torch.cuda.OutOfMemoryError as err:
        return {**row, "status": "skipped", "reason": f"out of GPU memory: {first_line(err)}"}
    except Exception as err:  # recorded in the row; the next model still runs
        traceback.print_exc()
        return {**row, "status": "error", "reason": f"{type(err).__name__}: {first_line(err)}"}
    finally:
        release()
    row["measured_ms"] = sig(ms)
    if peak is not None:  # the allocator's peak above the weights and inputs, against the model
        predicted = rank_memory_model(model, latent_shape=shape, cfg=False).activations
        row.update(activation_peak_gb=sig(peak / 1e9), activation_model_gb=sig(predicted / 1e9),
                   activation_ratio=sig(peak / predicted, 3))
    hw = datasheet_row(torch.cuda.get_device_name(placement.device)) if placement.is_cuda else None
    if hw is not None:
        bound = predict(model, hw, cfg=False, latent_shape=shape).step_s * 1e3
        row.update(bound_ms=sig(bound), bound_hardware=hw, ratio=sig(ms / bound, 3))
    if ceilings and ceilings.get("matmul_tflops") and ceilings.get("copy_tb_s"):
        row["ceiling_bound_ms"] = sig(ceiling_bound_ms(
            model, ceilings["matmul_tflops"], ceilings["copy_tb_s"], latent_shape=shape))
    return row


@torch.inference_mode()
def _time_forward(model: str, placement: Placement) -> tuple[float, int | None]:
    """Median ms of ``REPEATS`` forwards after one warm-up, and one more forward's allocator
    peak above what was allocated before it (on a GPU; ``None`` elsewhere): what
    ``analysis.memory_model`` calls the activations."""
    p, dev = get_preset(model), placement.device
    net = build_direct(model, dev)
    g = torch.Generator(device=dev).manual_seed(0)
    latent = torch.randn(p.latent_shape, generator=g, device=dev, dtype=torch.bfloat16)
    text = torch.randn(1, p.text_len, p.text_dim, generator=g, device=dev, dtype=torch.bfloat16)
    t = torch.tensor([500.0], device=dev)

    def once() -> None:
        net(hidden_states=latent, timestep=t, encoder_hidden_states=text, return_dict=False)

    ms = repeat(once, placement, rounds=REPEATS, warmup=1).median * 1e3
    if not placement.is_cuda:
        return ms, None
    with track_peak_memory(placement) as mem:
        once()
    return ms, mem.peak_bytes
