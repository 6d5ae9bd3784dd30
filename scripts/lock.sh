#!/usr/bin/env bash
# Refresh constraints.txt on purpose: the newest versions pyproject.toml allows, resolved in a
# fresh virtual environment with every extra, frozen. Then run make test: CI installs these.
#   scripts/lock.sh          (PYTHON, TORCH_SPEC as for scripts/bootstrap.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$(mktemp -d)/venv"
trap 'rm -rf "$(dirname "$venv")"' EXIT
"${PYTHON:-python3}" -m venv "$venv"
# shellcheck disable=SC2086  # TORCH_SPEC may carry pip options (--index-url ...)
"$venv/bin/python" -m pip install --quiet --no-compile ${TORCH_SPEC:-torch==2.13.0}
"$venv/bin/python" -m pip install --quiet --no-compile -e ".[pipeline,test,notebooks,book]"
{
    sed -n '1,3p' constraints.txt  # the header says what the file is
    "$venv/bin/python" -m pip freeze --exclude-editable | grep -v -i -E '^(torch|nvidia-|triton)'
} > constraints.txt.new
mv constraints.txt.new constraints.txt
echo "lock: constraints.txt refreshed ($(grep -c '==' constraints.txt) pins); now make test"
