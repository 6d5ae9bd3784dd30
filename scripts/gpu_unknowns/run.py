"""make gpu-check's first stage: the open unknowns of ppdit's GPU path, each answered by a
probe in its own process with a cap, most unknown first, within a budget (default 150 s; the
whole check fits 400 s on one H200). Writes ``<out>/first_stage/<gpu>-<date>.json``: per probe,
its status, seconds and the JSON line it printed (or the tail of its output).

  fork plain / guarded   who asks CUDA in the fork server's preload, and is a fork poisoned;
                         the same with ppdit's guard first (PYTORCH_NVML_BASED_CUDA_CHECK=1)
  guard test             tests/system/test_start_method.py's guard, on a CUDA build
  ranks                  forked CPU ranks on a GPU box: cache_key, TP compare; forkserver with
                         CUDA ranks (refused in one line)
  micro                  what waits behind a kernel spinning on another stream: explicit and
                         implicit syncs (first launches, cudaFree, graph capture); an NCCL world
                         of one (what a batch returns); FSDP2 from a bf16 folder on CUDA
  watchdog after/before  a posted op's timeout: kept from the posting, or raised later
  torchrun               two local ranks on the one GPU, generate --layout step on the toy

Usage: python scripts/gpu_unknowns/run.py [OUT] (run by scripts/gpu_check.sh).
"""

import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUDGET_S = float(os.environ.get("FIRST_STAGE_BUDGET_S", 150))
PY = sys.executable
TORCHRUN = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
            "ppdit", "generate", "--layout", "step", "--ranks", "2", "--device", "cuda",
            "--steps", "4", "--timeout", "90", "--out"]
NVML = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
GUARD = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/system/test_start_method.py",
         "-k", "never_initialise_cuda"]
# (name, cap s, command, extra environment): most unknown first
PROBES = (("fork plain", 40, [PY, str(HERE / "fork_probe.py"), "plain"], {}),
          ("fork guarded", 40, [PY, str(HERE / "fork_probe.py"), "guarded"], {}),
          ("micro", 75, [PY, str(HERE / "micro.py")], {}),
          ("watchdog after", 35, [PY, str(HERE / "watchdog.py"), "after"], {}),
          ("watchdog before", 35, [PY, str(HERE / "watchdog.py"), "before"], {}),
          ("ranks", 90, [PY, str(HERE / "ranks_probe.py")], {}),
          ("guard test", 60, GUARD, {}),
          ("torchrun", 75, TORCHRUN, {}))


def run_probe(cap: float, command: list[str], env: dict) -> dict:
    """One probe: its last JSON line (or output tail), status and seconds."""
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=ROOT, env={**os.environ, **env}, timeout=cap,
                              capture_output=True, text=True)
    except subprocess.TimeoutExpired as e:
        tail = (e.stdout or b"")[-600:]
        return {"status": "timeout", "seconds": round(time.monotonic() - start, 1),
                "tail": tail.decode(errors="replace") if isinstance(tail, bytes) else tail}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    row = {"status": "ok" if done.returncode == 0 else f"rc={done.returncode}",
           "seconds": round(time.monotonic() - start, 1)}
    if lines:
        row["answer"] = json.loads(lines[-1])
    else:
        row["tail"] = (done.stdout + done.stderr)[-800:]
    return row


def main(out: Path) -> int:
    start, rows = time.monotonic(), {}
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    for key in ("PPDIT_START_METHOD", "PPDIT_DEVICE", "PPDIT_NCCL_RULES",
                "PYTORCH_NVML_BASED_CUDA_CHECK", "CUDA_MODULE_LOADING"):
        os.environ.pop(key, None)  # each probe decides these itself
    with tempfile.TemporaryDirectory(prefix="ppdit-first-stage-") as tmp:
        for name, cap, command, extra in PROBES:
            left = BUDGET_S - (time.monotonic() - start)
            if left < min(cap, 20):
                rows[name] = {"status": "skipped", "reason": f"{left:.0f} s of the budget left"}
                continue
            command = [*command, tmp] if command is TORCHRUN else command
            rows[name] = run_probe(min(cap, left), command, {**env, **extra})
            print(f"first stage: {name}: {rows[name]['status']} in "
                  f"{rows[name].get('seconds', 0)} s", flush=True)
    report = {"schema": "ppdit.first_stage/1", "date": datetime.date.today().isoformat(),
              "gpu": _gpu(), "budget_s": BUDGET_S,
              "seconds": round(time.monotonic() - start, 1), "probes": rows}
    folder = out / "first_stage"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{report['gpu']}-{report['date']}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"first stage: wrote {path} in {report['seconds']:.0f} s")
    return 0


def _gpu() -> str:
    """The GPU's short name (h200), asked through NVML: this process starts no CUDA."""
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown-gpu"
    words = [w for w in name.lower().split() if any(c.isdigit() for c in w)]
    return words[0] if words else "unknown-gpu"


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "gpu_runs")))
