"""Where a GPU run was measured: the provenance block of ``gpu_runs/*.json``, and its file name.

Collected from what this process can know without guessing: the GPU as CUDA reports it, the
driver as ``nvidia-smi`` reports it, the versions of torch, diffusers and Python, and the git
commit of the checkout (plus whether it had uncommitted changes). Whatever cannot be found is
``null`` and listed in ``unknown``: a missing fact stays visibly missing, never filled in.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]  # the checkout this ppdit runs from


def gpu_facts() -> dict:
    """Name, count, memory (GB) and compute capability of GPU 0; nulls without CUDA."""
    if not torch.cuda.is_available():
        return {"name": None, "count": None, "memory_gb": None, "capability": None}
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "count": torch.cuda.device_count(),
            "memory_gb": round(props.total_memory / 1e9, 1),
            "capability": f"{props.major}.{props.minor}"}


def driver_version() -> str | None:
    """The NVIDIA driver's version (``nvidia-smi``), or ``None`` where it cannot be asked."""
    out = _stdout("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader") or ""
    return next((line.strip() for line in out.strip().splitlines()), None)


def git_state(root: Path = REPO, exclude: tuple[str, ...] = ("gpu_runs",)) -> dict:
    """The checkout's commit, and whether files other than ``exclude`` (what the caller itself
    writes: run files, a results log) differ from it; nulls outside a git checkout."""
    commit, skip = _stdout("git", "rev-parse", "HEAD", cwd=root), [f":!{p}" for p in exclude]
    changes = _stdout("git", "status", "--porcelain", "--", ".", *skip, cwd=root)
    if commit is None or changes is None:
        return {"commit": None, "dirty": None}
    return {"commit": commit.strip() or None, "dirty": bool(changes.strip())}


def tree_hash(root: Path = REPO, exclude: tuple[str, ...] = ("gpu_runs",)) -> str | None:
    """12 hex digits of the files that ran: every file git would track (tracked or not
    ignored), hashed by path and content as they are on disk, so a copy whose git metadata is
    stale (a device machine's) still names its own tree; ``None`` outside a git checkout."""
    listed = _stdout("git", "ls-files", "-z", "-co", "--exclude-standard", cwd=root)
    if listed is None:
        return None
    digest = hashlib.sha256()
    for name in sorted(set(listed.split("\0")) - {""}):
        path = root / name
        if path.is_file() and name.split("/")[0] not in exclude:
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def _stdout(*command: str, cwd: Path | None = None) -> str | None:
    """A command's output, or ``None`` where it is missing, fails or takes over 20 s."""
    try:
        return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=20,
                              check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(*, command: str, duration_s: float | None, today: dt.date | None = None) -> dict:
    """The provenance block of a run made on this machine now (see the module docstring)."""
    date = (today or dt.date.today()).isoformat()
    git, tree = git_state(), tree_hash()
    ran = f", tree {tree}" if tree else ""
    said = f" (git metadata: {git['commit'][:7]}{' + changes' if git['dirty'] else ''})" if (
        git["commit"]) else ""
    block = {
        "source": "measured by make gpu-check (python -m ppdit gpu-check) on this machine",
        "origin": f"make gpu-check, {date}{ran}{said}",
        "command": command, "date": date,
        "duration_s": None if duration_s is None else round(duration_s, 1),
        "gpu": gpu_facts(), "driver": driver_version(), "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "diffusers": next((d.version for d in metadata.distributions(name="diffusers")), None),
        "python": platform.python_version(), "git": git, "tree": tree, "unknown": [],
        "notes": None,
    }
    block["unknown"] = unknown_fields(block)
    return block


def unknown_fields(block: dict, prefix: str = "") -> list[str]:
    """Dotted names of the null fields of a provenance block (``notes`` aside)."""
    return [name for key, value in block.items() if key != "notes"
            for name in (unknown_fields(value, f"{prefix}{key}.") if isinstance(value, dict)
                         else [prefix + key] if value is None else [])]


def gpu_slug(name: str, count: int = 1) -> str:
    """A file-name form of a GPU: "NVIDIA H100 80GB HBM3" -> "h100-80gb-hbm3"; "2x-..." for
    two of them."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-").removeprefix("nvidia-")
    return f"{count}x-{slug}" if count > 1 else slug


def report_path(folder: Path, slug: str, date: str) -> Path:
    """``folder/<slug>-<date>.json``; a second run on the same day gets ``-2``, and so on, so
    that no measurement overwrites another."""
    path, n = folder / f"{slug}-{date}.json", 2
    while path.exists():
        path, n = folder / f"{slug}-{date}-{n}.json", n + 1
    return path
