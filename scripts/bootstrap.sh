#!/usr/bin/env bash
# Create (or reuse) .venv and install ppdit with the given extras: scripts/bootstrap.sh [test|notebooks|book|...]
#
# torch is installed first, on its own, because letting pip resolve it as a dependency would
# download a multi-GB CUDA build. Default: torch==2.13.0 (on this project's CPU machines pip
# finds a local CPU wheel). GPU users choose their build, e.g.
#   TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cu128" make demo
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-python3}"
torch_spec="${TORCH_SPEC:-torch==2.13.0}"
# The versions CI last passed with (scripts/lock.sh refreshes them): a fresh install is the
# tested install. CONSTRAINTS= (empty) lets pip choose.
constraints="${CONSTRAINTS-constraints.txt}"
pin=(${constraints:+-c "$constraints"})

[ -x .venv/bin/python ] || "$python" -m venv .venv
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    echo "bootstrap: installing ${torch_spec}"
    # shellcheck disable=SC2086  # TORCH_SPEC may carry pip options (--index-url ...)
    .venv/bin/python -m pip install --quiet --no-compile "${pin[@]}" ${torch_spec}
fi
# --no-compile: pip would byte-compile every installed module (a minute or more on 2 cores, torch
# alone 25 s); Python compiles what is imported, on first import, and caches it. The Makefile
# lets it write that cache even where PYTHONDONTWRITEBYTECODE is set.
# Reinstall only when the project's requirements or the extras changed.
stamp=".venv/.ppdit-installed-${extras:-base}"
want="$(cat pyproject.toml ${constraints:+"$constraints"} | sha256sum | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "bootstrap: installing ppdit${extras:+[$extras]} (editable)"
    .venv/bin/python -m pip install --quiet --no-compile "${pin[@]}" -e ".${extras:+[$extras]}"
    echo "$want" > "$stamp"
fi
