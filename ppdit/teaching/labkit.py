"""Helpers for the labs: load a student's file (or the reference solution) as an importable
module, so the checkers can run its functions — also inside spawned ranks, which import
workers by module name."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType


def load_module(path: str | Path) -> ModuleType:
    """Import the Python file at ``path`` under its own stem, with its folder on ``sys.path``
    (spawned ranks inherit ``sys.path`` and re-import the module by that name)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no lab file at {path}")
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def lab_implementation(default: str | Path) -> ModuleType:
    """The file a checker grades: ``$PPDIT_LAB_IMPL`` if set (CI points it at a solution), else
    the student's stub next to the checker."""
    return load_module(os.environ.get("PPDIT_LAB_IMPL", default))
