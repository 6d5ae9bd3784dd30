"""Where ``torch.compile`` keeps compiled kernels: a project-local folder per machine kind.

A warm TorchInductor cache (``TORCHINDUCTOR_CACHE_DIR``, by default under ``/tmp``) turns a
compile of many seconds into a fraction of one, which keeps a compiling notebook inside its
time budget. Inside the checkout (``.cache/inductor``, git-ignored) it survives ``/tmp``
clean-ups and keeps one project's kernels apart from another's.

One sub-folder per key, because a checkout outlives its machine (a shared home directory, one
clone on a laptop and a GPU box) and Inductor compiles CPU kernels for *this* CPU
(``-march=native``, ``ATEN_CPU_CAPABILITY``) without naming either in its key: served another
CPU's kernels, compiled TP gave wrong answers. ``cache_key()`` names the torch build, the CPU
architecture, capability and model, the CUDA version and, once this process uses CUDA, the
GPUs' architecture (a CPU rank never asks: a fork that did could not use CUDA after).

Call ``use_project_compile_cache()`` before the first ``torch.compile``. Inductor writes its own
default into the environment the first time it needs the folder, so a value equal to that
default, or one of ppdit's folders for another key (inherited from a parent), is "not chosen".
"""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path

ENV = "TORCHINDUCTOR_CACHE_DIR"


def cache_root() -> Path:
    """The folder that holds one sub-folder per ``cache_key()``: ``<checkout>/.cache/inductor``
    in the checkout that holds this package (editable install), else ``~/.cache/ppdit/inductor``."""
    root = Path(__file__).resolve().parents[2]
    ours = (root / "pyproject.toml").exists() and (root / "ppdit").is_dir()
    return (root / ".cache" if ours else Path.home() / ".cache" / "ppdit") / "inductor"


def cache_key() -> str:
    """What makes compiled kernels differ, as a folder name, e.g.
    ``torch2.13.0+cpu-x86_64-avx512-cpu3fa2b1c4-nocuda``: the CPU capability is the one ATen runs
    with (``ATEN_CPU_CAPABILITY`` may lower it, and Inductor follows it)."""
    import torch

    parts = [f"torch{torch.__version__}", platform.machine() or "unknown",
             torch.backends.cpu.get_cpu_capability().lower(), f"cpu{_cpu_id()}"]
    if torch.version.cuda is None:
        parts.append("nocuda")
    else:
        parts.append(f"cu{torch.version.cuda}")
        if torch.cuda.is_initialized():  # asking would initialise CUDA in a CPU rank
            caps = sorted({torch.cuda.get_device_capability(i)
                           for i in range(torch.cuda.device_count())})
            parts.append("sm" + "+".join(f"{a}{b}" for a, b in caps))
    return "-".join(p.replace("/", "_").replace(" ", "_") for p in parts)


def _cpu_id() -> str:
    """8 hex digits naming this CPU model and its instruction set extensions (what
    ``-march=native`` compiles for)."""
    text = platform.processor()
    with_info = Path("/proc/cpuinfo")
    if with_info.exists():
        keep = ("model name", "flags", "Features", "CPU part", "CPU implementer")
        seen: dict[str, str] = {}
        for line in with_info.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in keep:
                seen.setdefault(key.strip(), value.strip())
        text = repr(sorted(seen.items())) or text
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def use_project_compile_cache(path: str | Path | None = None) -> Path:
    """Point Inductor's cache at ``path`` (default ``cache_root() / cache_key()``) unless
    ``TORCHINDUCTOR_CACHE_DIR`` already names a folder someone chose; return the folder in
    effect. An explicit ``path`` always wins."""
    chosen = os.environ.get(ENV)
    if path is None and chosen and not _ours_or_default(Path(chosen)):
        return Path(chosen)
    if path is None:
        path = cache_root() / cache_key()
    path = Path(path).resolve()
    path.mkdir(parents=True, exist_ok=True)
    os.environ[ENV] = str(path)
    return path


def _ours_or_default(path: Path) -> bool:
    """Whether ``path`` is no one's choice (see the module): Inductor's own default, or one of
    ppdit's folders (set here or in a parent process, perhaps for another key)."""
    # Imported here: Inductor's modules take a second to import, and most callers never ask.
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    if str(path) == os.path.abspath(default_cache_dir()):
        return True
    root, path = cache_root().resolve(), path.resolve()
    return path == root or path.parent == root  # the root: what ppdit chose before keys
