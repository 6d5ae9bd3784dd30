#!/usr/bin/env bash
# make lab: .venv with everything the lessons import, ppdit's JupyterLab settings, then
# JupyterLab on the lessons. Extra arguments go to JupyterLab (e.g. --no-browser --port 8890).
#
# The settings (scripts/jupyterlab_overrides.json, installed as the environment's defaults):
# JupyterLab 4.4+ sends widget messages to kernel subshells, so two quick changes to an explorer
# ran two redraws at once and left a stale figure stacked on the new one; ppdit's explorers
# are race-free themselves (ppdit/viz/explorer.py), and the setting turns the subshells off too.
#
# The news and update pop-ups (Ask, by default) cover the first outputs a learner sees: off.
# PYTHONDONTWRITEBYTECODE, where a machine sets it, makes the fork server recompile torch and
# diffusers at every start (22.9 s of imports instead of 7.5 s before a lesson's first rank).
set -euo pipefail
unset PYTHONDONTWRITEBYTECODE
cd "$(dirname "$0")/.."
scripts/bootstrap.sh notebooks
settings=.venv/share/jupyter/lab/settings
mkdir -p "$settings"
cp scripts/jupyterlab_overrides.json "$settings/overrides.json"
echo "lab: JupyterLab on $(pwd); start with notebooks/00_tour.ipynb (Ctrl-C here stops it)"
exec .venv/bin/jupyter lab --ServerApp.root_dir="$(pwd)" notebooks/00_tour.ipynb "$@"
