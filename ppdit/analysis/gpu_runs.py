"""The GPU measurements committed under ``gpu_runs/``: loaded, checked, and labelled.

Why labels: ppdit is mostly run on CPUs, and its notebooks print GPU numbers that some other
machine measured. A number without its origin invites the wrong comparison, so every GPU number
a notebook prints carries the run's label — the GPU, the torch build, and where the figure
comes from::

    Wan 2.1-1.3B forward ...: 617 ms ... [H100 80GB, torch 2.11+cu130, transcribed from issue 14]

The files are written by ``python -m ppdit gpu-check`` (``ppdit.gpu_check``) or transcribed by
hand from a measured report, both in the schema of ``ppdit.analysis.gpu_run_schema``; loading
checks that schema first. Numbers only here: the picture is ``ppdit.viz.roofline``."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ppdit.analysis.gpu_run_schema import MEASUREMENTS, GpuRunError, check_report
from ppdit.analysis.hardware import Hardware, ops_seconds
from ppdit.analysis.roofline import model_ops

GPU_RUNS = Path(__file__).resolve().parents[2] / "gpu_runs"  # the repository's folder


@dataclass(frozen=True)
class GpuRun:
    """One checked ``gpu_runs/*.json`` file."""
    path: Path
    data: dict

    @property
    def provenance(self) -> dict:
        return self.data["provenance"]

    @property
    def label(self) -> str:
        """"<GPU>, torch <version>, <origin>": what every printed number of this run carries."""
        p = self.provenance
        gpu = p["gpu"]["name"] or "unknown GPU"
        if (p["gpu"]["count"] or 1) > 1:
            gpu = f"{p['gpu']['count']} x {gpu}"
        torch = f"torch {p['torch']}" if p["torch"] else "torch version unknown"
        return f"{gpu}, {torch}, {p['origin']}"

    def section(self, name: str) -> dict | None:
        """A measurement section whose status is "ok" or "partial", else ``None``."""
        part = self.data["measurements"][name]
        return part if part["status"] in ("ok", "partial") else None

    def forwards(self) -> list[dict]:
        """The forward rows that were measured (status "ok")."""
        part = self.section("forwards")
        return [r for r in part["rows"] if r["status"] == "ok"] if part else []

    def lines(self, section: str, *, label: bool = True) -> list[str]:
        """One sentence per figure of ``section`` ("tests" or a measurement), each ending with
        this run's label (``label=False``: without it); a section that was not measured says
        so, and one measured in part says what is missing."""
        part = self.data["tests"] if section == "tests" else self.data["measurements"][section]
        status = part["status"]
        measured = status in ("ok", "partial") or section == "tests"
        texts = _SENTENCES[section](part) if measured else []
        if status != "ok" and section != "tests":
            texts.append(f"{section}: {status.replace('_', ' ')}: {part['reason']}")
        return [f"{text} [{self.label}]" if label else text for text in texts]


def load_run(path: str | Path) -> GpuRun:
    """Read one file and check it against the schema (``GpuRunError`` names the broken rule)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise GpuRunError(f"{path} is not valid JSON (rule: a GPU run is one JSON object): "
                          f"{err}") from err
    check_report(data, str(path))
    return GpuRun(path, data)


def load_runs(folder: str | Path | None = None, *, committed_only: bool = False) -> list[GpuRun]:
    """Every ``*.json`` in ``folder`` (default: the repository's ``gpu_runs/``), oldest first.
    ``committed_only`` keeps the files git tracks, so that a run just written by ``gpu-check``
    on this machine does not change what a notebook prints until it is committed. Outside a git
    checkout every file counts (a release holds only committed files)."""
    folder = Path(folder) if folder is not None else GPU_RUNS
    paths = sorted(folder.glob("*.json"))
    if committed_only:
        tracked = _tracked(folder)
        if tracked is not None:
            paths = [p for p in paths if p.name in tracked]
    runs = [load_run(p) for p in paths]
    return sorted(runs, key=_order)


def _order(run: GpuRun) -> tuple[str, str, int]:
    """Date, name, then the day's run number: ``x-<date>.json`` is 1, before ``x-<date>-2.json``
    (by name alone "-" sorts before ".")."""
    found = re.fullmatch(r"(.*?\d{4}-\d\d-\d\d)(?:-(\d+))?", run.path.stem)
    key = (found[1], int(found[2] or 1)) if found else (run.path.stem, 1)
    return (run.provenance["date"] or "", *key)


MULTI_RANK = ("sync_probe", "real_generate", "layouts", "launch")  # sections of CUDA ranks


def record(runs: list[GpuRun]) -> str:
    """What has run on GPUs, from the run files: the sentence the README and the book quote
    (a test keeps their copies equal to it), never a bare claim that the code runs there:
    failed tests by name, and how CUDA ranks ran (gloo ranks sharing a GPU are not NCCL)."""
    if not runs:
        return "GPU record (gpu_runs/): nothing has run on a GPU yet."
    last, tests = runs[-1], runs[-1].data["tests"]
    failed = tests["failed"] or 0
    names = ", ".join(tests.get("failed_names") or []) or "names not recorded"
    shown = f"{tests['passed'] or 0} passed, {failed} failed" + (f" ({names})" if failed else "")
    return (f"GPU record (gpu_runs/): latest {last.path.name} [{last.label}]: "
            f"{tests['scope'] or 'the GPU suite'}: {shown}; {_ranks_ran(runs)}.")


def _ranks_ran(runs: list[GpuRun]) -> str:
    """How CUDA ranks have run: by backend, with the devices of the sections that ran them."""
    seen: dict[str, set[str]] = {}
    for run in runs:
        for name in MULTI_RANK:
            part = run.section(name)
            if part and len(part.get("devices") or []) > 1:
                shared = len(set(part["devices"])) < len(part["devices"])
                how = part.get("backend") or ("gloo" if shared else "backend unknown")  # NCCL
                how += " sharing one GPU" if shared else ""  # refuses ranks sharing a GPU
                seen.setdefault(how, set()).add(run.path.name)
    ran = [f"{k} in {', '.join(sorted(v))}" for k, v in sorted(seen.items())]
    nccl = "" if any(k.startswith("nccl") for k in seen) else "; NCCL: not yet run"
    return "multi-rank CUDA: " + ("; ".join(ran) if ran else "not yet run") + nccl


def _tracked(folder: Path) -> set[str] | None:
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", "."], cwd=folder, timeout=10,
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {Path(name).name for name in out.decode().split("\0") if name}


@dataclass(frozen=True)
class ForwardPoint:
    """One measured GPU forward beside its lower bounds, ready to plot or print."""
    label: str  # the run's provenance label
    model: str
    tokens: int | None
    measured_ms: float
    bound_ms: float | None  # with the datasheet's ceilings of ``bound_hardware``
    bound_hardware: str | None
    ceiling_bound_ms: float | None  # with the ceilings the same GPU reached in the same run
    compiled_ms: float | None  # the same forward under torch.compile, where measured

    @property
    def ratio(self) -> float | None:
        """Measured / datasheet bound: how far from the hardware's limit the software runs."""
        return self.measured_ms / self.bound_ms if self.bound_ms else None


def forward_points(runs: list[GpuRun]) -> list[ForwardPoint]:
    """Every measured forward of ``runs``. Where a row has no bound at the measured ceilings
    but its run measured them (a transcribed run), the bound is computed here from them."""
    points = []
    for run in runs:
        device = run.section("device") or {}
        for r in run.forwards():
            ceiling = r["ceiling_bound_ms"]
            if ceiling is None and device.get("matmul_tflops") and device.get("copy_tb_s") \
                    and device.get("matmul_dtype") == r["dtype"]:
                ceiling = ceiling_bound_ms(
                    r["model"], device["matmul_tflops"], device["copy_tb_s"], dtype=r["dtype"],
                    latent_shape=tuple(r["latent_shape"]) if r["latent_shape"] else None)
            points.append(ForwardPoint(run.label, r["model"], r["tokens"], r["measured_ms"],
                                       r["bound_ms"], r["bound_hardware"], ceiling,
                                       r["compiled_ms"]))
    return points


def ceiling_bound_ms(model: str, matmul_tflops: float, copy_tb_s: float, *,
                     latent_shape: tuple[int, ...] | None = None, dtype: str = "bf16") -> float:
    """The roofline lower bound of one forward with a GPU's *measured* ceilings (its best matmul
    and its copy bandwidth) in place of the datasheet's: the bound that GPU can actually reach.
    The gap between it and a measured forward is the software's, not the hardware's."""
    nan = float("nan")  # only the bf16 peak is used; the others are not measured
    hw = Hardware("measured", matmul_tflops * 1e12, nan, None, copy_tb_s * 1e12, nan, (),
                  "measured ceilings")
    ops = model_ops(model, latent_shape, dtype=dtype)
    return sum(ops_seconds(ops, hw, dtype)) * 1e3


def format_report(run: GpuRun) -> str:
    """The whole run as a table: its provenance once, then per section its status, its time
    and its figures (``GpuRun.lines`` without the label, which the header carries)."""
    p, git = run.provenance, run.provenance["git"]
    head = [f"GPU run {run.path.name}: every figure below is [{run.label}]",
            f"  source: {p['source']}",
            f"  driver {p['driver'] or '?'}, CUDA {p['cuda'] or '?'}, diffusers "
            f"{p['diffusers'] or '?'}, python {p['python'] or '?'}, commit "
            f"{(git['commit'] or '?')[:12]}{' (dirty)' if git['dirty'] else ''}, "
            f"took {fmt(p['duration_s']) + ' s' if p['duration_s'] is not None else '?'}"]
    if p["unknown"]:
        head.append(f"  not known: {', '.join(p['unknown'])}")
    rows = [f"  {'section':<12}{'status':<13}{'time':>7}  figures"]
    for name in ("tests", *run.data["measurements"]):
        part = run.data["tests"] if name == "tests" else run.data["measurements"][name]
        took = f"{part['seconds']:.0f} s" if part["seconds"] is not None else "-"
        for i, line in enumerate(run.lines(name, label=False) or ["-"]):
            lead = f"{name:<12}{part['status']:<13}{took:>7}" if i == 0 else " " * 32
            rows.append(f"  {lead}  {line}")
    return "\n".join(head + rows)


def fmt(value: float | int | None) -> str:
    """A number as it was recorded: thousands separated, no digits added ("8.0", "3,246")."""
    if value is None:
        return "?"
    if isinstance(value, int) or abs(value) >= 1000 or (value >= 100 and float(value).is_integer()):
        return f"{value:,.0f}"
    return repr(float(value))


# One sentence per figure, section by section


def _tests(t: dict) -> list[str]:
    if t["status"] in ("skipped", "not_measured"):
        return [f"GPU tests: {t['status'].replace('_', ' ')} ({t['reason']})"]
    counts = ", ".join(f"{t[k]} {k}" for k in ("passed", "failed", "skipped", "errors")
                       if t[k] is not None)
    where = t["command"] or t["scope"] or "GPU tests"
    why = f" ({t['reason']})" if t["reason"] else ""
    return [f"GPU tests ({where}): {counts or 'no counts'}{why}"]


def _sync_probe(s: dict) -> list[str]:
    return [] if s["stream_sync_s"] is None else [
        f"a posted receive ({s['backend']}), its send {fmt(s['delay_s'])} s later: stream sync "
        f"{fmt(s['stream_sync_s'])} s, device-wide sync {fmt(s['device_sync_s'])} s ("
        + ("as" if s["as_modelled"] else "NOT as") + " ppdit assumes)"]


def _ring_memory(s: dict) -> list[str]:
    return [f"ring attention over {s['ring']} ranks at {r['model']}'s shape ({r['tokens']:,} "
            f"tokens, {r['heads']} x {r['head_dim']}, {r['dtype']}): peak {fmt(r['peak_gb'])} GB "
            f"vs the model's {fmt(r['model_gb'])} GB ({fmt(r['ratio'])}x); max |diff| vs plain "
            f"attention {fmt(r['max_abs_diff'])}" for r in s["rows"]]


def _real_generate(s: dict) -> list[str]:
    head = f"{s['model']} generate, latent {tuple(s['latent_shape'] or ())}, {s['steps']} steps"
    return [f"{head}, {r['layout']}: {r['status']}, {fmt(r['seconds'])} s, peak "
            f"{' / '.join(fmt(g) for g in r['peak_gb'] or []) or '?'} GB per rank"
            + (f"; vs one device: bitwise {r['bitwise_equal']}, |diff| / |ref| "
               f"{fmt(r['rel_diff'])}" if r["rel_diff"] is not None else "") for r in s["rows"]]


def _launch(s: dict) -> list[str]:
    n, out = s["world_size"] or "n", []
    if s["fresh_s"] is not None:
        out.append(f"launch(hello, {n}) on fresh ranks: {fmt(s['fresh_s'])} s per call")
    if s["fresh_s_range"] is not None:
        lo, hi = s["fresh_s_range"]
        out.append(f"launch(hello, {n}) on fresh ranks: {fmt(lo)}-{fmt(hi)} s per call "
                   "(range over calls)")
    if s["pool_job_s"] is not None:
        out.append(f"the same job on a live ranks({n}) pool: {fmt(s['pool_job_s'])} s (its "
                   f"start-up, paid once: {fmt(s['pool_start_s'])} s)")
    return out


def _layouts(s: dict) -> list[str]:
    where = f" ({', '.join(s['devices'])}, {s['backend']})" if s["devices"] else ""
    return [f"{r['layout']}, {s['world_size']} ranks{where}, {r['preset']} preset: "
            f"{fmt(r['ms'])} ms per {r['per']}"
            + (f" vs one device {fmt(r['one_device_ms'])} ms ({fmt(r['speedup'])}x)"
               if r["one_device_ms"] is not None else "") for r in s["rows"]]


def _device(s: dict) -> list[str]:
    out = []
    if s["matmul_tflops"] is not None:
        size = f" {s['matmul_n']}^3" if s["matmul_n"] else ""
        out.append(f"{s['matmul_dtype'] or ''}{size} matmul: {fmt(s['matmul_tflops'])} TFLOP/s")
    if s["copy_tb_s"] is not None:
        size = f" of {fmt(s['copy_gb'])} GB" if s["copy_gb"] else ""
        out.append(f"device copy{size}: {fmt(s['copy_tb_s'])} TB/s (read + write)")
    return out


def _cuda_graphs(s: dict) -> list[str]:
    return [f"{r['preset']} ({r['context']}): "
            + (f"eager {fmt(r['eager_ms'])} ms -> graph replay {fmt(r['graph_ms'])} ms per "
               "denoising step, " if r["eager_ms"] is not None else "graph replay vs eager: ")
            + f"{fmt(r['speedup'])}x" for r in s["rows"]]


def _vae(s: dict) -> list[str]:
    about = ", ".join(x for x in (s["config"], s["latent_shape"] and
                                  f"latent {tuple(s['latent_shape'])}", s["dtype"]) if x)
    out = [f"streaming VAE ({about}): first frame "
           f"{fmt(s['first_frame_ms'])} ms vs full decode {fmt(s['full_ms'])} ms"]
    if s["bitwise_equal"] is not None:
        out.append("one latent frame per push == full decode, bit for bit: "
                   f"{s['bitwise_equal']}")
    for peak in s["peaks"]:
        mode = f"{peak['mode']} decode" if peak["mode"] else "decode (mode not recorded)"
        out.append(f"peak GPU memory of the {mode}: {fmt(peak['gb'])} GB")
    return out


def _forwards(s: dict) -> list[str]:
    out = []
    for r in s["rows"]:
        what = f"{r['model']} forward, {r['dtype']}" + (
            f", {r['tokens']:,} tokens" if r["tokens"] else "")
        if r["status"] != "ok":
            out.append(f"{what}: {r['status']} ({r['reason']})")
            continue
        line = f"{what}: {fmt(r['measured_ms'])} ms"
        if r["bound_ms"] is not None:
            line += (f" vs roofline lower bound {fmt(r['bound_ms'])} ms on {r['bound_hardware']}"
                     f" ({fmt(r['ratio'])}x)")
        if r["ceiling_bound_ms"] is not None:
            line += f"; bound at the measured ceilings {fmt(r['ceiling_bound_ms'])} ms"
        out.append(line)
        if r["compiled_ms"] is not None:
            out.append(f"{r['model']} forward under torch.compile: {fmt(r['compiled_ms'])} ms "
                       f"({fmt(r['compiled_speedup'])}x faster) after a "
                       f"{fmt(r['compile_s'])} s cold compile")
        if r.get("activation_peak_gb") is not None:
            out.append(f"{r['model']} forward's allocator peak above its weights: "
                       f"{fmt(r['activation_peak_gb'])} GB vs the memory model's activations "
                       f"{fmt(r['activation_model_gb'])} GB ({fmt(r['activation_ratio'])}x)")
    return out


_SENTENCES = {name: globals()[f"_{name}"] for name in ("tests", *MEASUREMENTS)}  # _<section>
