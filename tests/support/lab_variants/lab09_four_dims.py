"""Lab 09 gone wrong: the shape gets four slots, as an image's (batch, channels, height, width).

A video latent has five dims, (batch, channels, frames, height, width); ``pack`` keeps the
first four and records ndim 4, so the header is self-consistent and the last dim is gone.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ppdit.teaching.labkit import load_module

# The reference solution with one function replaced: the mistake, and nothing else.
_solution = load_module(Path(__file__).resolve().parents[3] / "labs" / "solutions"
                        / "lab09_envelope_solution.py")
from lab09_envelope_solution import *  # noqa: E402, F403 -- every other name as the solution's

SHAPE_SLOTS = 4  # batch, channels, height, width


def pack(header: ChunkHeader) -> torch.Tensor:  # noqa: F405
    """The solution's header with only the first four dims, and ndim 4."""
    wire = _solution.pack(header)
    dims = len(header.shape[:SHAPE_SLOTS])
    wire[SLOT_NDIM] = dims  # noqa: F405
    wire[SLOT_SHAPE + dims:SLOT_SHAPE + MAX_NDIM] = 0  # noqa: F405
    return wire
