"""The check from start to end: tests, measurements, the report file, the printed table.

Without CUDA it stops at once, says why and writes nothing: a GPU run file made on a CPU would
be evidence of nothing. With CUDA, every section ends with a status (see ``sections``), the
report is checked against its schema before it is written, and the exit status is 0 only when
the tests passed and no measurement failed (out of GPU memory is a failure, with its message).
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from ppdit.analysis import gpu_run_schema as schema
from ppdit.analysis.gpu_run_schema import MEASUREMENTS, SCHEMA, TESTS, check_report, empty_section
from ppdit.gpu_check.env import gpu_slug, provenance, report_path
from ppdit.gpu_check.sections import cuda_placement, run_section
from ppdit.gpu_check.suite import run_gpu_tests

# The measurement modules and ppdit.analysis.gpu_runs import diffusers (seconds): they are
# imported where they are used, so that a machine without CUDA gets its answer at once.

SECTIONS = tuple(MEASUREMENTS)  # the unknowns, then launch, layouts, ... forwards
BUDGET_S = sum(schema.STAGE_BUDGETS_S.values())  # 8 minutes on one H100


def gpu_check(out: Path = Path("gpu_runs"), *, tests: bool = True,
              tests_timeout_s: float | None = None, skip: Sequence[str] = (),
              command: str | None = None) -> int:
    """Run the check (see ``ppdit.gpu_check``); write ``out/<gpu>-<date>.json``; exit status."""
    unknown = set(skip) - set(SECTIONS)
    if unknown:
        raise ValueError(f"skip={sorted(unknown)}: the sections are {', '.join(SECTIONS)}")
    if not torch.cuda.is_available():
        build = torch.version.cuda
        why = (f"this torch ({torch.__version__}) is built for CUDA {build} but sees no GPU"
               if build else f"this torch ({torch.__version__}) is a CPU-only build")
        print(f"gpu-check needs a CUDA GPU: torch.cuda.is_available() is False ({why}). Nothing "
              "was run and nothing was written. On a GPU machine, install a CUDA build of torch "
              "(TORCH_SPEC, see scripts/bootstrap.sh) and run `make gpu-check` again.",
              file=sys.stderr)
        return 1
    from ppdit.analysis.gpu_runs import GpuRun, format_report

    start = time.perf_counter()
    command = command or shlex.join(["python", "-m", "ppdit", *sys.argv[1:]])
    print(f"gpu-check on {torch.cuda.get_device_name(0)}: the GPU tests, then the "
          f"measurements ({', '.join(s for s in SECTIONS if s not in skip)}); about "
          f"{BUDGET_S // 60} minutes on one H100", flush=True)
    tests_timeout_s = tests_timeout_s or schema.STAGE_BUDGETS_S["tests"]
    tests_section = (run_section("tests", TESTS, run_gpu_tests, timeout_s=tests_timeout_s)
                     if tests else empty_section(TESTS, "skipped", "--skip-tests was given"))
    report = build_report(tests_section, measure(skip, start), command=command,
                          duration_s=time.perf_counter() - start)
    path = write_report(report, out)
    print("\n" + format_report(GpuRun(path, report)))
    took = report["provenance"]["duration_s"]
    over = f" (over the {BUDGET_S // 60}-minute budget)" if took > BUDGET_S else ""
    print(f"\nwrote {path} in {took:.0f} s{over}")
    return 0 if passed(report) else 1


def build_report(tests: dict, measurements: dict, *, command: str, duration_s: float) -> dict:
    """The report: sections as measured, provenance collected now; checked against the schema
    (a bug in the check must not be written down as evidence)."""
    report = {"schema": SCHEMA, "provenance": provenance(command=command, duration_s=duration_s),
              "tests": tests, "measurements": measurements}
    check_report(report, "the report gpu-check built")
    return report


def write_report(report: dict, out: Path) -> Path:
    """``out/<gpu>-<date>.json`` (``-2``, ``-3`` ... for more runs that day); the path."""
    gpu = report["provenance"]["gpu"]
    out.mkdir(parents=True, exist_ok=True)
    path = report_path(out, gpu_slug(gpu["name"] or "unknown-gpu", gpu["count"] or 1),
                       report["provenance"]["date"])
    path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    return path


def dry_run() -> int:
    """The stages in order with their budgets (no CUDA needed, nothing run or written)."""
    for name, seconds in schema.STAGE_BUDGETS_S.items():
        print(f"{name:14s} {seconds:4d} s")
    print(f"{'in all':14s} {BUDGET_S:4d} s: a stage that would overrun what is left is "
          "skipped, and the report says why")
    return 0


def _time_left(name: str, start: float) -> str | None:
    """Why stage ``name`` is skipped (its budget exceeds the time left), or None."""
    left = BUDGET_S - (time.perf_counter() - start)
    need = schema.STAGE_BUDGETS_S[name]
    return None if left >= need else f"{left:.0f} s of the {BUDGET_S} s left; it needs {need} s"


def measure(skip: Sequence[str] = (), start: float | None = None) -> dict:
    """Every measurement section in order: what no run has measured first (``unknowns``), then
    those on record: ranks (before this process holds much GPU memory), the ceilings, which the
    forwards' second bound needs, the largest models last. From ``start`` on, a section that
    would overrun the check's budget is skipped with the reason."""
    start = time.perf_counter() if start is None else start
    from ppdit.gpu_check import forwards, kernels, ranks, streaming_vae, unknowns

    gpu = cuda_placement()
    plan = {"sync_probe": (unknowns.sync_probe,), "ring_memory": (unknowns.ring_memory, gpu),
            "real_generate": (unknowns.real_generate,), "launch": (ranks.launch_cost,),
            "layouts": (ranks.layout_step_times,), "device": (kernels.device_ceilings, gpu),
            "cuda_graphs": (kernels.graph_replay, gpu), "vae": (streaming_vae.streaming_vae, gpu),
            "forwards": (forwards.wan_forwards, gpu)}
    out = {}
    for name in SECTIONS:
        fn, *args = plan[name]
        if name == "forwards":  # the second bound needs the ceilings, where they were measured
            args.append(out["device"] if out["device"]["status"] == "ok" else None)
        why = f"--skip {name}" if name in skip else _time_left(name, start)
        out[name] = (empty_section(MEASUREMENTS[name], "skipped", why) if why else
                     run_section(name, MEASUREMENTS[name], fn, *args))
    return out


def passed(report: dict) -> bool:
    """The tests passed (or were skipped on purpose) and no measurement failed, in whole or
    in part: a "partial" section (one layout of several erred) fails the check too, or a
    broken layout would hide behind the ones that ran."""
    sections = report["measurements"].values()
    return report["tests"]["status"] in ("ok", "skipped") and all(
        s["status"] not in ("error", "partial") for s in sections)
