"""Where ``torch.compile`` keeps compiled kernels: a project-local folder, unless told otherwise.

TorchInductor caches generated code and compiled kernels on disk (``TORCHINDUCTOR_CACHE_DIR``,
by default a per-user folder under ``/tmp``). A warm cache turns a compile of many seconds into
a load of a fraction of one, which is what keeps a notebook that compiles inside its time
budget on a re-run. Keeping the cache inside the checkout (``.cache/inductor``, git-ignored)
makes it survive ``/tmp`` clean-ups and keeps one project's kernels apart from another's.

Call ``use_project_compile_cache()`` before the first ``torch.compile`` in a process. Inductor
reads the variable whenever it needs the folder, and the first time writes its own default
into the environment; a value equal to that default is therefore treated as "not chosen".
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "TORCHINDUCTOR_CACHE_DIR"


def project_root() -> Path | None:
    """The checkout that holds this package (editable install), or None for an installed copy."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").exists() and (root / "ppdit").is_dir() else None


def use_project_compile_cache(path: str | Path | None = None) -> Path:
    """Point Inductor's cache at ``path`` (default ``<checkout>/.cache/inductor``, else
    ``~/.cache/ppdit/inductor``) unless ``TORCHINDUCTOR_CACHE_DIR`` already names another
    folder; return the folder in effect. An explicit ``path`` always wins."""
    if path is None and os.environ.get(ENV) and os.environ[ENV] != _inductor_default():
        return Path(os.environ[ENV])
    if path is None:
        root = project_root()
        path = (root / ".cache" if root else Path.home() / ".cache" / "ppdit") / "inductor"
    path = Path(path).resolve()
    path.mkdir(parents=True, exist_ok=True)
    os.environ[ENV] = str(path)
    return path


def _inductor_default() -> str:
    """Inductor's own default folder. Inductor writes it into the environment the first time
    it needs a folder, so finding it there means nobody chose it: it may be replaced."""
    # Imported here: Inductor's modules take a second to import, and most callers never ask.
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return os.path.abspath(default_cache_dir())


__all__ = ["project_root", "use_project_compile_cache"]
