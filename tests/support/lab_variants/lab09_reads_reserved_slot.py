"""Lab 09 gone wrong: ``unpack`` reads the generation slot whatever the header's version.

With V1 writers that keep their promise to write 0 there, and a default of 0, nobody notices.
A V1 writer that put anything else in its reserved slot gives the V2 reader a generation
that no sender ever meant.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from ppdit.teaching.labkit import load_module

# The reference solution with one function replaced: the mistake, and nothing else.
_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab09_envelope_solution.py")
from lab09_envelope_solution import *  # noqa: E402, F403 -- every other name as the solution's


def unpack(wire: torch.Tensor) -> ChunkHeader:  # noqa: F405
    """The solution's reading, but the generation slot is read whatever the version."""
    return replace(_solution.unpack(wire), generation=int(wire[SLOT_GENERATION]))  # noqa: F405
