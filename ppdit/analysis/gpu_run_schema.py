"""What a GPU run file (``gpu_runs/*.json``) must hold, and the check that says which rule a
file breaks.

Why a schema at all: these files are evidence. A notebook prints their numbers next to the CPU
ones, so a misspelt field (silently missing from a table) or a string where a number belongs
(``"617 ms"``) must stop the reader with the file, the field and the rule, not print nonsense.

The shape, version ``ppdit.gpu_run/3`` (every field present; ``null`` where unknown), is
``REPORT`` below: ``schema``, ``provenance`` (where the numbers come from: source, a sentence;
origin, its short form for labels; ``unknown``, the dotted names of the fields left null), the
GPU ``tests``, and one ``measurements`` section each for sync_probe, ring_memory, real_generate
(/2 added these three), launch, layouts, device, cuda_graphs, vae and forwards. Every section
has a status, a reason (why, when not "ok"), the seconds it took, and notes.

Units are fixed by the field name, as the figures are quoted: ``*_ms`` milliseconds, ``*_s``
seconds, ``*_gb`` decimal gigabytes (1e9 bytes), ``*_tflops`` TFLOP/s, ``*_tb_s`` TB/s,
``speedup`` and ``ratio`` plain factors."""

from __future__ import annotations

import math
import re
from typing import Any

SCHEMA = "ppdit.gpu_run/3"  # /3: the tree that ran, the failed tests by name
STATUSES = ("ok", "partial", "skipped", "error", "not_measured")

# Leaf types: name -> (test, the rule a wrong value breaks). A trailing "?" allows null.
_LEAVES = {
    "str": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
            "a whole number >= 0 (a count)"),
    "num": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) and v >= 0,
            "a finite number >= 0 in the unit its name says (ms, s, GB, TFLOP/s, TB/s, x)"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "date": (lambda v: isinstance(v, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", v) is not None,
             "a date written YYYY-MM-DD"),
    "status": (lambda v: v in STATUSES, f"one of {', '.join(STATUSES)}"),
    "shape": (lambda v: isinstance(v, list) and bool(v) and all(
        isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in v),
        "a tensor shape: a list of whole numbers > 0"),
    "range": (lambda v: isinstance(v, list) and len(v) == 2 and all(
        isinstance(n, (int, float)) and not isinstance(n, bool) and n >= 0 for n in v)
        and v[0] <= v[1], "[low, high] with 0 <= low <= high"),
    "strlist": (lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
                "a list of strings"),
    "numlist": (lambda v: isinstance(v, list) and all(_LEAVES["num"][0](n) for n in v),
                "a list of finite numbers >= 0 (one per rank)"),
}

_SECTION = {"status": "status", "reason": "str?", "seconds": "num?", "notes": "str?"}

PROVENANCE = {
    "source": "str", "origin": "str", "command": "str?", "date": "date?", "duration_s": "num?",
    "gpu": {"name": "str?", "count": "int?", "memory_gb": "num?", "capability": "str?"},
    "driver": "str?", "cuda": "str?", "torch": "str?", "diffusers": "str?", "python": "str?",
    "git": {"commit": "str?", "dirty": "bool?"}, "tree": "str?", "unknown": "strlist",
    "notes": "str?",
}
TESTS = {**_SECTION, "command": "str?", "scope": "str?", "passed": "int?", "failed": "int?",
         "skipped": "int?", "errors": "int?", "failed_names": "strlist?"}
LAUNCH = {**_SECTION, "world_size": "int?", "devices": "strlist?", "fresh_s": "num?",
          "fresh_s_range": "range?", "pool_start_s": "num?", "pool_job_s": "num?"}
LAYOUTS = {**_SECTION, "world_size": "int?", "devices": "strlist?", "backend": "str?",
           "rows": [{"layout": "str", "per": "str", "preset": "str", "ms": "num?",
                     "one_device_ms": "num?", "speedup": "num?"}]}
DEVICE = {**_SECTION, "matmul_tflops": "num?", "matmul_n": "int?", "matmul_dtype": "str?",
          "copy_tb_s": "num?", "copy_gb": "num?"}
CUDA_GRAPHS = {**_SECTION, "rows": [{"preset": "str", "context": "str", "latent_shape": "shape?",
                                     "steps": "int?", "eager_ms": "num?", "graph_ms": "num?",
                                     "speedup": "num?"}]}
VAE = {**_SECTION, "config": "str?", "latent_shape": "shape?", "dtype": "str?",
       "first_frame_ms": "num?", "full_ms": "num?", "stream_total_ms": "num?",
       "bitwise_equal": "bool?", "peaks": [{"mode": "str?", "gb": "num"}]}
FORWARDS = {**_SECTION, "rows": [{
    "model": "str", "dtype": "str", "latent_shape": "shape?", "tokens": "int?",
    "status": "status", "reason": "str?", "measured_ms": "num?", "bound_ms": "num?",
    "bound_hardware": "str?", "ratio": "num?", "ceiling_bound_ms": "num?",
    "compiled_ms": "num?", "compile_s": "num?", "compiled_speedup": "num?",
    "activation_peak_gb": "num?", "activation_model_gb": "num?", "activation_ratio": "num?"}]}
SYNC_PROBE = {**_SECTION, "world_size": "int?", "devices": "strlist?", "backend": "str?",
              "delay_s": "num?", "stream_sync_s": "num?", "device_sync_s": "num?",
              "as_modelled": "bool?"}
RING_MEMORY = {**_SECTION, "ring": "int?", "rows": [{
    "model": "str", "dtype": "str", "tokens": "int?", "heads": "int?", "head_dim": "int?",
    "peak_gb": "num?", "model_gb": "num?", "ratio": "num?", "max_abs_diff": "num?"}]}
REAL_GENERATE = {**_SECTION, "model": "str?", "latent_shape": "shape?", "steps": "int?",
                 "devices": "strlist?", "backend": "str?", "folder_s": "num?", "rows": [{
                     "layout": "str", "status": "status", "reason": "str?", "seconds": "num?",
                     "peak_gb": "numlist?", "bitwise_equal": "bool?", "max_abs_diff": "num?",
                     "rel_diff": "num?", "within_tol": "bool?"}]}
MEASUREMENTS = {"sync_probe": SYNC_PROBE, "ring_memory": RING_MEMORY,
                "real_generate": REAL_GENERATE, "launch": LAUNCH, "layouts": LAYOUTS,
                "device": DEVICE, "cuda_graphs": CUDA_GRAPHS, "vae": VAE, "forwards": FORWARDS}
# The check's stages in order, each with the seconds it may take on one H100, 480 in all: a
# GPU rented for ten minutes (machine start included). Most unknown first: the GPU tests (every
# layout on CUDA ranks), then what no run has measured (``gpu_check.unknowns``), the numbers
# on record last, where a stage that would overrun is skipped.
STAGE_BUDGETS_S = {"tests": 170, "sync_probe": 25, "ring_memory": 20, "real_generate": 100,
                   "launch": 25, "layouts": 40, "device": 15, "cuda_graphs": 20, "vae": 25,
                   "forwards": 40}
REPORT = {"schema": "str", "provenance": PROVENANCE, "tests": TESTS,
          "measurements": MEASUREMENTS}


class GpuRunError(ValueError):
    """A GPU run file breaks the schema; the message names the file, the field and the rule."""


def check_report(data: Any, where: str = "report") -> None:
    """Raise ``GpuRunError`` listing every broken rule of ``data`` (nothing when it is valid)."""
    problems: list[str] = []
    _check(data, REPORT, "", problems)
    if isinstance(data, dict) and "schema" in data and data["schema"] != SCHEMA:
        problems.insert(0, f"schema is {data['schema']!r}, but this reader knows {SCHEMA!r} "
                           "(rule: a file says which schema version it follows)")
    if not problems:
        _check_statuses(data, problems)
    if problems:
        shown = "\n  ".join(problems[:12])
        more = f"\n  ... and {len(problems) - 12} more" if len(problems) > 12 else ""
        raise GpuRunError(f"{where} is not a valid GPU run ({SCHEMA}):\n  {shown}{more}")


def _check(value: Any, spec: Any, path: str, problems: list[str]) -> None:
    if isinstance(spec, str):
        kind, nullable = spec.rstrip("?"), spec.endswith("?")
        if value is None and nullable:
            return
        test, rule = _LEAVES[kind]
        if not test(value):
            allowed = " or null" if nullable else ""
            problems.append(f"{path} is {value!r}: rule: it must be {rule}{allowed}")
    elif isinstance(spec, list):
        if not isinstance(value, list):
            problems.append(f"{path} is {value!r}: rule: it must be a list of rows")
            return
        for i, row in enumerate(value):
            _check(row, spec[0], f"{path}[{i}]", problems)
    elif not isinstance(value, dict):
        problems.append(f"{path or 'the file'} is {type(value).__name__}: rule: it must be an "
                        "object with the fields " + ", ".join(spec))
    else:
        for key in spec:
            if key not in value:
                problems.append(f"{_join(path, key)} is missing: rule: every field of the "
                                "schema is present (null where unknown)")
        for key in value:
            if key not in spec:
                problems.append(f"{_join(path, key)} is not a field of {SCHEMA}: rule: only "
                                f"known fields (a misspelt one would be silently lost); known "
                                f"here: {', '.join(spec)}")
        for key, sub in spec.items():
            if key in value:
                _check(value[key], sub, _join(path, key), problems)


def _check_statuses(data: dict, problems: list[str]) -> None:
    """A section (or a row with a status of its own) that is not "ok" must say why."""
    places = {"tests": data["tests"], **{f"measurements.{k}": v
                                         for k, v in data["measurements"].items()}}
    for name, part in data["measurements"].items():
        for i, row in enumerate(part.get("rows", [])):
            if "status" in row:
                places[f"measurements.{name}.rows[{i}]"] = row
    for path, part in places.items():
        if part["status"] != "ok" and not part["reason"]:
            problems.append(f"{path}.reason is empty while status is {part['status']!r}: rule: "
                            "whatever is not 'ok' says why")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def empty_section(spec: dict, status: str, reason: str | None = None, **fields) -> dict:
    """A section with every field of ``spec`` present: ``fields`` given, the rest null ([] for
    rows). What a writer starts from, so a new field can never be forgotten."""
    out = {k: ([] if isinstance(v, list) else None) for k, v in spec.items()}
    unknown = set(fields) - set(spec)
    if unknown:
        raise KeyError(f"{sorted(unknown)} are not fields of this section: {', '.join(spec)}")
    out.update(status=status, reason=reason, **fields)
    return out
