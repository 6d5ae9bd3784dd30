"""Keep Inductor's compile cache inside the project, so a kernel is compiled once per checkout.

``torch.compile`` spends seconds per graph in Inductor on this CPU (10-25 s for a first, "cold"
compile of a few Wan blocks). Inductor caches compiled graphs (the FX graph cache) and kernels on
disk, by default under ``/tmp/torchinductor_<user>``, which a CI runner or a container restart
throws away. ``use_project_cache()`` points ``TORCHINDUCTOR_CACHE_DIR`` at ``<repo>/.cache/
inductor`` (``.cache/`` is git-ignored) unless the variable is already set, so a second run of the
tests, the notebooks or a benchmark reuses the first one's work, and CI can keep the folder
between jobs. Call it before the first compile; spawned ranks inherit the variable.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "TORCHINDUCTOR_CACHE_DIR"


def project_cache_dir() -> Path:
    """``<repo>/.cache/inductor``: next to the package, whatever the working directory."""
    return Path(__file__).resolve().parents[2] / ".cache" / "inductor"


def use_project_cache() -> Path:
    """Set ``TORCHINDUCTOR_CACHE_DIR`` to the project cache unless the user chose one already;
    return the directory in effect (created if missing)."""
    path = Path(os.environ.setdefault(ENV_VAR, str(project_cache_dir())))
    path.mkdir(parents=True, exist_ok=True)
    return path


__all__ = ["ENV_VAR", "project_cache_dir", "use_project_cache"]
