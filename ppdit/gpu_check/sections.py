"""Run one measurement of the check so that whatever happens becomes a section of the report.

Why: a GPU check that dies in its fifth minute because the 14B model does not fit (or because
one layout breaks) tells its user nothing about the other four minutes. Each measurement runs
here: it returns its fields, or it fails and the section records the status and the reason —
"skipped" for too little GPU memory, "error" for anything else (with the traceback printed).
Interrupts still end the check.

The few CUDA-only calls of the check (its placement, free memory, emptying the cache, a rank's
peak) live here too, each behind ``torch.cuda.is_available()`` or the rank's placement.
"""

from __future__ import annotations

import gc
import math
import time
import traceback
from collections.abc import Callable

import torch

from ppdit.analysis.gpu_run_schema import empty_section
from ppdit.runtime.device import Placement


def cuda_placement() -> Placement:
    """GPU 0, for the measurements this process makes itself (the ranks get theirs from the
    launcher's placement rule)."""
    if not torch.cuda.is_available():
        raise RuntimeError("the GPU measurements need CUDA: torch.cuda.is_available() is False")
    return Placement(torch.device("cuda", 0), "nccl")


def free_gb() -> float:
    """Free memory on GPU 0 in GB (0 without CUDA)."""
    return torch.cuda.mem_get_info(0)[0] / 1e9 if torch.cuda.is_available() else 0.0


def release() -> None:
    """Give the memory of dropped tensors back, so the next section starts from free memory."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def rank_peak_gb(ctx) -> float | None:
    """A pool job: this rank's allocator peak (GB) since the last call, reset for the next
    (None off CUDA: no allocator keeps one)."""
    if not ctx.placement.is_cuda:
        return None
    peak = torch.cuda.max_memory_allocated(ctx.device)
    torch.cuda.reset_peak_memory_stats(ctx.device)
    return sig(peak / 1e9, 3)


def sig(x: float, digits: int = 4) -> float:
    """``x`` rounded to ``digits`` significant digits: what a report should claim."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def run_section(name: str, spec: dict, measure: Callable[..., dict], *args, **kwargs) -> dict:
    """``measure(*args, **kwargs)`` -> its fields (``status`` and ``reason`` optional), as a
    complete section of schema ``spec``, with the seconds it took."""
    print(f"gpu-check: {name} ...", flush=True)
    start = time.perf_counter()
    try:
        fields = measure(*args, **kwargs)
        section = empty_section(spec, fields.pop("status", "ok"), fields.pop("reason", None),
                                **fields)
    except Exception as err:  # out of memory too: a failure, with its message
        traceback.print_exc()
        section = empty_section(spec, "error", f"{type(err).__name__}: {first_line(err)}")
    finally:
        release()
    section["seconds"] = round(time.perf_counter() - start, 1)
    why = f" ({section['reason']})" if section["reason"] else ""
    print(f"gpu-check: {name}: {section['status']} in {section['seconds']} s{why}", flush=True)
    return section


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (the rest goes to the printed traceback)."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else "(no message)"
