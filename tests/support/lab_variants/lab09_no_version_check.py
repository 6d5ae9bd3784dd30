"""Lab 09 gone wrong: ``check`` never looks at the version.

Every other rule is there, and between two peers of the same version nothing goes wrong. A
V1 receiver then accepts a V2 header and reads its slots as V1 ones: here it never learns
which weights made the chunk; in a V2 that had moved a field, every number would be wrong.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ppdit.teaching.labkit import load_module

# The reference solution with one function replaced: the mistake, and nothing else.
_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab09_envelope_solution.py")
from lab09_envelope_solution import *  # noqa: E402, F403 -- every other name as the solution's


def check(header: ChunkHeader, expected: Expected) -> None:  # noqa: F405
    """Every rule but the version: any version is read as one this receiver speaks."""
    _solution.check(replace(header, version=expected.speaks), expected)
