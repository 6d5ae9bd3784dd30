"""Shared fixtures: the tiny model, and a check that no test leaves child processes behind."""

from __future__ import annotations

import functools
import inspect
import os
import re
import time
from pathlib import Path

import pytest
import torch

from ppdit.model import build_model
from ppdit.runtime.processes.pool import RankPool, live_pids
from ppdit.vae.presets import build_vae

# Batched forwards use other GEMM shapes than one-at-a-time ones, so the float summation order
# inside the matmuls differs: results agree to rounding, never bit for bit. Over 28 Euler steps
# of the tiny model the worst difference seen is ~5e-6 on values of size ~5.
BATCHED_TOL = {"rtol": 1e-4, "atol": 1e-4}

# A push of k > 1 latent frames runs every causal conv over k frames at once: the same sums as
# k single-frame pushes but blocked differently inside the convolution kernels, so the float
# summation order differs. On the tiny VAE (pixels clamped to [-1, 1]) the worst difference
# seen is ~2e-6; 1e-5 absolute leaves room for other CPUs' kernels and stays far below any
# visible change (one 8-bit level is 2/255 on [-1, 1]).
CHUNKED_TOL = {"rtol": 1e-4, "atol": 1e-5}

# A replayed graph runs the kernels eager mode chose during warm-up, but cuBLAS/cuDNN may pick
# different algorithms inside a capture (workspace limits), so GPU results agree to rounding.
GRAPH_TOL = {"rtol": 1e-4, "atol": 1e-4}

# The memory model counts the tensors alive at a block's high point and leaves out small ones
# (norm statistics, the rope tables' slices, kernel workspaces): 15% is the issue's bar.
MODEL_TOL = 0.15


# The CPU suite compares with CPU references bit for bit, so it keeps every rank on the CPU even
# on a machine with GPUs (nbval's kernels inherit this too); the GPU tests (marked ``gpu``) ask
# for CUDA explicitly and run there instead of skipping.
os.environ.setdefault("PPDIT_DEVICE", "cpu")
# Gloo forgives orderings NCCL does not (ppdit.runtime.comm.nccl_rules): every rank the suite starts
# keeps NCCL's point-to-point rules, so an order that would hang on GPUs fails here, named. Strict:
# no send is eager, since NCCL guarantees none (its buffer depends on the transport and protocol).
os.environ.setdefault("PPDIT_NCCL_RULES", "strict")

# The lanes, by what a test starts (its folder says; ``make test-fast`` runs the first):
#   unit    no process, no rank (tests/unit/conftest.py refuses one)      < 1 minute
#   ranks   gloo ranks, mostly on the session's live pools
#   system  processes: the CLI, fresh launches, signals, torchrun, two hosts, compiles
#   book    the labs, the offline book, the claims ledger, nbval over the notebooks
#   gpu     needs CUDA (skipped with the reason elsewhere)
LANES = ("unit", "ranks", "system", "book", "gpu")
ROOT = Path(__file__).resolve().parents[1]


def lane_of(path: Path) -> str:
    """The lane of a collected file: its folder under tests/, or "book" for a notebook."""
    rel = Path(path).resolve().relative_to(ROOT)
    if rel.parts[0] == "notebooks":
        return "book"
    lane = rel.parts[1] if rel.parts[0] == "tests" and len(rel.parts) > 2 else ""
    if lane not in LANES:
        raise pytest.UsageError(f"{rel}: a test lives in one of tests/{{{','.join(LANES)}}}/")
    return lane


# A test states a claim when its body compares results (bit for bit or to a named tolerance):
# the load lane (``make test-load``) runs exactly these while every core is busy.
CLAIM = re.compile(r"torch\.equal|assert_close|allclose|bit for bit|bitwise")


@functools.cache
def _notebook_claims(path: Path) -> bool:
    return bool(CLAIM.search(path.read_text()))


def states_a_claim(item) -> bool:
    """Whether the test's own source compares results (``CLAIM``); for a notebook's cell,
    whether its notebook does anywhere (a cell needs the cells before it)."""
    if item.path.suffix == ".ipynb":
        return _notebook_claims(item.path)
    try:
        return bool(CLAIM.search(inspect.getsource(item.function)))
    except (AttributeError, OSError, TypeError):  # a generated test
        return False


STACK = ("torch", "diffusers", "transformers", "accelerate", "numpy", "nbval", "nbclient",
         "ipykernel", "matplotlib", "jupyter-book")


def pytest_report_header(config) -> list[str]:
    """The versions under test, first thing in ``make test``, against constraints.txt."""
    from importlib.metadata import PackageNotFoundError, version

    pins = dict(line.strip().lower().split("==", 1) for line in
                (ROOT / "constraints.txt").read_text().splitlines() if "==" in line)
    shown = []
    for name in STACK:
        try:
            got = version(name)
        except PackageNotFoundError:
            got = "absent"
        want = pins.get(name)
        shown.append(f"{name} {got}" + ("" if want in (None, got) else f" (constraints: {want})"))
    return ["versions: " + ", ".join(shown)]


def pytest_collection_modifyitems(config, items):
    for item in items:
        lane = lane_of(item.path)
        item.add_marker(getattr(pytest.mark, lane))
        if lane != "unit":
            item.add_marker(pytest.mark.slow)
        if states_a_claim(item):
            item.add_marker(pytest.mark.claim)


@pytest.fixture(scope="session")
def folders(tmp_path_factory):
    """The tiny pipeline folder with each scheduler: {"unipc": path, "flow_match": path}
    (seconds, ~2.5 MB; built once per session, for the prompt -> video tests of every lane)."""
    from ppdit.checkpoint.tiny import build_tiny_pipeline

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("pipelines")
    return {s: build_tiny_pipeline(root / s, scheduler=s) for s in ("unipc", "flow_match")}


@pytest.fixture(scope="session")
def tiny():
    """The tiny preset with seed 0, as every rank builds it."""
    torch.set_num_threads(1)
    return build_model("tiny", seed=0)


@pytest.fixture(scope="session")
def vae():
    """The tiny VAE with seed 0, as the decoding ranks build it."""
    torch.set_num_threads(1)
    return build_vae("tiny", seed=0)


def spawned_children() -> list[int]:
    """PIDs of live rank processes this test process started (spawned children, or children
    of its fork server), other than the ranks of the live pools the tests share (``pools``)."""
    me, procs, pooled = os.getpid(), {}, live_pids()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        procs[int(stat.parent.name)] = (int(fields[1]), fields[0], cmd)
    servers = {pid for pid, (ppid, _, cmd) in procs.items()
               if ppid == me and b"forkserver" in cmd}
    return [pid for pid, (ppid, state, cmd) in procs.items()
            if state != "Z" and pid not in pooled
            and ((ppid == me and b"spawn_main" in cmd) or ppid in servers)]


@pytest.fixture(scope="session")
def pools():
    """``pools(n)``: a live pool of n ranks shared by the tests that launch repeatedly, so the
    suite pays each size's start-up once. Tests that expect a failure use fresh launches (a
    failure stops a pool; the next use would restart it, which costs what it saves)."""
    live: dict[tuple[int, bool], RankPool] = {}

    def get(n: int, stage: bool = False) -> RankPool:
        """``stage=True``: messages staged through host buffers, as ranks sharing a GPU do."""
        if (n, stage) not in live:
            live[(n, stage)] = RankPool(n, threads_per_rank=1, timeout_s=600, echo=False,
                                        stage=stage or None)
        return live[(n, stage)]

    yield get
    for pool in live.values():
        pool.close()


@pytest.fixture
def no_orphans():
    """Fail the test if any spawned rank outlives it (give teardown a moment first)."""
    yield
    deadline = time.monotonic() + 5
    while spawned_children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert spawned_children() == [], "the launcher left child processes running"
