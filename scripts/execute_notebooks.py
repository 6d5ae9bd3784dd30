"""Execute notebooks in place (restart-and-run-all) and save them with their outputs.

    .venv/bin/python scripts/execute_notebooks.py notebooks/01_step_split_pp.ipynb [...]

nbval later replays every cell and compares against these outputs, so a notebook must be
re-executed and committed whenever code it uses changes. Each notebook runs in its own folder,
like Jupyter does; the time each took is printed (the budget is 3 minutes on CPU). Claims the
cells record go to the committed ledger (``notebooks/claims``): this is how it is regenerated.
The kernel spec is stored as ipykernel names it, so JupyterLab opens a notebook unmodified.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

LEDGER = Path(__file__).resolve().parents[1] / "notebooks" / "claims"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def execute(path: Path, timeout_s: int = 600) -> float:
    """Run every cell of ``path`` in a fresh kernel and write the outputs back."""
    nb = nbformat.read(path, as_version=4)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    start = time.monotonic()
    NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    nbformat.write(nb, path)
    return time.monotonic() - start


def main(paths: list[str]) -> int:
    os.environ["PPDIT_CLAIMS_DIR"] = str(LEDGER)  # the kernels inherit it
    for p in paths:
        took = execute(Path(p))
        print(f"{p}: {took:.0f} s{'  (over the 180 s budget!)' if took > 180 else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
