#!/usr/bin/env bash
# make gpu-check: the one-shot GPU check (python -m ppdit gpu-check), on a box that may have
# no package index (a GPU rented for ten minutes). It runs on the first interpreter whose torch
# sees a GPU: $PYTHON, then .venv/bin/python, then python3 (a rented box's system torch is a
# CUDA build; `make test`'s .venv holds the CPU wheel). What that interpreter lacks of ppdit's
# dependencies (diffusers, transformers, pytest, ...) comes from $WHEELS, a folder of wheels
# (`pip download` them where an index is reachable), never from the network, into a venv
# beside the checkout (.venv-gpu, seeing the system's torch), never the system interpreter. Without a CUDA
# torch anywhere it says so within seconds and writes nothing. Arguments go to gpu-check
# (`make gpu-check ARGS=--dry-run` lists the stages and their budgets).
set -euo pipefail
cd "$(dirname "$0")/.."
py=""
for candidate in "${PYTHON:-}" .venv/bin/python python3; do
  [ -n "$candidate" ] && command -v "$candidate" >/dev/null 2>&1 || continue
  if "$candidate" -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null
  then py=$candidate; break; fi
done
if [ -z "$py" ]; then
  if [[ " $* " == *" --dry-run "* ]]; then py=${PYTHON:-.venv/bin/python}; fi
fi
if [ -z "$py" ]; then
  echo "gpu-check needs a CUDA GPU and a CUDA build of torch: none of \$PYTHON," \
       ".venv/bin/python, python3 sees one. Nothing was run and nothing was written." >&2
  exit 1
fi
if [ -n "${WHEELS:-}" ]; then  # offline: only what is missing, only from the folder
  if ! "$py" -c "import sys; sys.exit(sys.prefix == sys.base_prefix)"; then
    # never into the system's interpreter: a venv beside the checkout that sees its CUDA torch
    "$py" -m venv --system-site-packages .venv-gpu
    py=.venv-gpu/bin/python
  fi
  "$py" -m pip install --quiet --no-index --find-links "$WHEELS" -e ".[test,pipeline]"
fi
missing=$("$py" -c "import importlib.util as u; print(' '.join(m for m in ('diffusers', \
'transformers', 'pytest', 'safetensors') if u.find_spec(m) is None))")
if [ -n "$missing" ]; then
  echo "gpu-check: $py lacks $missing; give a folder of wheels: WHEELS=dir make gpu-check" >&2
  exit 1
fi
echo "gpu-check: $py, $("$py" -c 'import torch; print("torch", torch.__version__, "CUDA",
torch.version.cuda)')"
export PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}"
# The first stage: the open unknowns, each probe in its own process (scripts/gpu_unknowns/run.py,
# FIRST_STAGE_BUDGET_S, default 120 s) into gpu_runs/first_stage/. FIRST_STAGE=0 leaves it out,
# FIRST_STAGE=only runs nothing else.
if [[ " $* " != *" --dry-run "* && "${FIRST_STAGE:-1}" != 0 ]]; then
  FIRST_STAGE_BUDGET_S=${FIRST_STAGE_BUDGET_S:-120} "$py" scripts/gpu_unknowns/run.py gpu_runs
  [ "${FIRST_STAGE:-1}" = only ] && exit 0
fi
exec "$py" -m ppdit gpu-check "$@"
