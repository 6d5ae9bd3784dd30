"""Shared fixtures: the tiny model, and a check that no test leaves child processes behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from ppdit.model import build_model

# Batched forwards use other GEMM shapes than one-at-a-time ones, so the float summation order
# inside the matmuls differs: results agree to rounding, never bit for bit. Over 28 Euler steps
# of the tiny model the worst difference seen is ~5e-6 on values of size ~5.
BATCHED_TOL = {"rtol": 1e-4, "atol": 1e-4}


@pytest.fixture(scope="session")
def tiny():
    """The tiny preset with seed 0, as every rank builds it."""
    torch.set_num_threads(1)
    return build_model("tiny", seed=0)


def spawned_children() -> list[int]:
    """PIDs of live processes whose parent is this test process and that were spawned."""
    me, out = os.getpid(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z" and b"spawn_main" in cmd:
            out.append(int(stat.parent.name))
    return out


@pytest.fixture
def no_orphans():
    """Fail the test if any spawned rank outlives it (give teardown a moment first)."""
    yield
    deadline = time.monotonic() + 5
    while spawned_children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert spawned_children() == [], "the launcher left child processes running"
