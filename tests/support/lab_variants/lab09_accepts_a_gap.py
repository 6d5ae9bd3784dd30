"""Lab 09 gone wrong: ``check`` refuses a chunk it has seen, but not one that skips ahead.

Written as "the index must not go back", it catches a repeat; a sender that skipped chunk 12
goes through, and the video silently loses its frames.
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
    """"The index must not go back": a chunk ahead of the next one is taken as the next."""
    if header.chunk_index > expected.next_chunk:
        expected = replace(expected, next_chunk=header.chunk_index)
    _solution.check(header, expected)
