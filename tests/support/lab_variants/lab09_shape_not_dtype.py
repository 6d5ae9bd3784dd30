"""Lab 09 gone wrong: ``check`` compares the shape with the buffer but not the dtype.

The shape is what people look at (the PP0 size mismatch). A bfloat16 payload of the right
shape then lands in a float32 buffer: half the bytes it waits for; or, in a float16 buffer,
exactly the bytes it waits for, and every number reinterpreted.
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
    """Every rule but the dtype: the receiver's own dtype stands in for the header's."""
    if 0 <= header.dtype_code < len(DTYPES):  # noqa: F405
        expected = replace(expected, dtype=DTYPES[header.dtype_code])  # noqa: F405
    _solution.check(header, expected)
