"""Device and backend, chosen in one place; the few CUDA-only calls live here behind that choice.

The rule, decided once per launch by ``decide_placement``:

* no CUDA GPU visible (or ``device="cpu"`` / ``PPDIT_DEVICE=cpu``): every rank on the CPU, gloo;
* a GPU for each local rank: rank r on ``cuda:r``, NCCL;
* fewer GPUs than local ranks (one GPU, a 2-rank lesson): ranks share them round-robin
  (``cuda:(r % gpus)``) over gloo. NCCL refuses two ranks on one GPU and gloo moves only host
  memory (a CUDA tensor fails with "writev ... Bad address"), so in this *shared* mode every
  message is **staged** through a host buffer (``runtime.comm.wire`` does it for messages and
  the layouts' collectives when ``Placement.staged`` says so). ``stage=True`` stages CPU ranks too:
  how the tests check the staged transport without a GPU.

NCCL's point-to-point rules can be kept by gloo ranks (``nccl_rules=True``, or
``$PPDIT_NCCL_RULES``: 1, "strict" or the eager limit in bytes; ``runtime.comm.nccl_rules``):
the test suite turns them on, strict, so an ordering that would hang on GPUs hangs on the CPU.
Everything else asks a ``Placement`` instead of calling ``torch.cuda``, so the CPU path of the
tests and notebooks is the same code a GPU user runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import torch

BACKENDS = ("auto", "gloo", "nccl")
DEVICES = ("auto", "cpu", "cuda")
DEVICE_ENV = "PPDIT_DEVICE"  # "cpu" keeps every rank on the CPU even when GPUs are visible
RULES_ENV = "PPDIT_NCCL_RULES"  # "1", "strict" or an eager limit in bytes: gloo keeps NCCL's rules


@dataclass(frozen=True)
class Placement:
    """Where one rank computes and how it talks to the others."""

    device: torch.device
    backend: str  # "nccl" or "gloo"
    staged: bool = False  # messages go through host buffers (gloo with CUDA tensors)
    nccl_rules: int | None = None  # gloo keeps NCCL's P2P rules, this eager limit (bytes)

    @property
    def is_cuda(self) -> bool:
        """Whether CUDA-only features (events, streams, graphs) are available on this rank."""
        return self.device.type == "cuda"

    def synchronize(self, device_wide: bool = False) -> None:
        """Wait for the work this rank queued on its current stream: what timing and tracing
        need (on the CPU the work is done on return). Never device-wide unless asked: a posted
        NCCL receive is a kernel spinning on NCCL's own stream, so ``cudaDeviceSynchronize``
        would wait for a sender that may be waiting for this rank (PyTorch's NCCL barrier
        moved to a stream sync for this reason). ``device_wide`` is that wait; on CPU ranks
        keeping NCCL's rules it waits for every posted operation, so the hang shows here."""
        if device_wide and self.is_cuda:
            torch.cuda.synchronize(self.device)
        elif device_wide:
            self.implicit_sync("an explicit device-wide sync (cudaDeviceSynchronize)")
        elif self.is_cuda:
            torch.cuda.current_stream(self.device).synchronize()

    def implicit_sync(self, cause: str) -> None:
        """Where CUDA may synchronise the whole device by itself (``cause``: entering
        ``torch.cuda.graph``, ``cudaFree``): nothing to do on a GPU, which does it; CPU ranks
        keeping NCCL's rules wait there for every posted operation, so the hang shows here."""
        if self.nccl_rules is not None:
            from ppdit.runtime.comm.nccl_rules import device_sync

            device_sync(cause)

    def empty_cache(self) -> None:
        """Give the caching allocator's free blocks back to the device: a ``cudaFree``, which
        synchronises the device (modelled on CPU ranks keeping the rules)."""
        if self.is_cuda:
            torch.cuda.empty_cache()
        self.implicit_sync("the caching allocator's cudaFree (empty_cache)")


@dataclass(frozen=True)
class PlacementDecision:
    """The placement of every rank of a launch, and why (picklable: it travels to the ranks)."""

    kind: str  # "cpu", "cuda" (a GPU per rank) or "cuda-shared" (ranks share GPUs)
    backend: str
    gpus: int  # GPUs the ranks use (0 on CPU)
    staged: bool
    reason: str
    nccl_rules: int | None = None  # see Placement

    def for_rank(self, local_rank: int) -> Placement:
        """This rank's device (and, on CUDA, make it the current device)."""
        if self.kind == "cpu":
            return Placement(torch.device("cpu"), self.backend, self.staged, self.nccl_rules)
        device = torch.device("cuda", local_rank % self.gpus)
        torch.cuda.set_device(device)
        return Placement(device, self.backend, self.staged, self.nccl_rules)


def decide_placement(local_world_size: int, *, backend: str = "auto", device: str | None = None,
                     stage: bool | None = None, nccl_rules: bool | int | None = None
                     ) -> PlacementDecision:
    """Apply the module's rule for ``local_world_size`` ranks on this host. ``device`` ("auto",
    "cpu", "cuda"; default ``$PPDIT_DEVICE``, else "auto") and ``backend`` ("auto", "gloo",
    "nccl") override it where they can; a request that cannot work (NCCL with two ranks on one GPU,
    CUDA without a GPU) is a ``ValueError`` saying why. ``stage`` forces host staging on (CPU ranks
    too) or off (only where messages stay on the host anyway); ``None`` stages exactly when gloo
    carries CUDA tensors. ``nccl_rules``: True, an eager limit in bytes, or False (default
    ``$PPDIT_NCCL_RULES``; gloo ranks only)."""
    decision = _decide(local_world_size, backend, device, stage)
    limit = _rules_limit(nccl_rules)
    if limit is None or decision.backend != "gloo":
        return decision
    return replace(decision, nccl_rules=limit,
                   reason=decision.reason + f"; NCCL's P2P rules kept (eager up to {limit:,} B)")


def _rules_limit(nccl_rules: bool | int | None) -> int | None:
    """The eager limit asked for (None: the rules are off)."""
    from ppdit.runtime.comm.nccl_rules import EAGER_BYTES

    if nccl_rules is None:
        text = os.environ.get(RULES_ENV, "0").strip()
        if not text.isdigit() and text != "strict":
            raise ValueError(f"${RULES_ENV}={text!r} must be 0 (off), 1 (on), strict (every "
                             "send waits for its receive) or an eager limit in bytes")
        nccl_rules = 0 if text == "strict" else {0: False, 1: True}.get(int(text), int(text))
    if nccl_rules is True:
        return EAGER_BYTES
    if nccl_rules is False:
        return None
    if nccl_rules < 0:
        raise ValueError(f"nccl_rules={nccl_rules} must be True, False or an eager limit >= 0")
    return int(nccl_rules)


def _decide(local_world_size: int, backend: str, device: str | None, stage: bool | None
            ) -> PlacementDecision:
    device = device or os.environ.get(DEVICE_ENV) or "auto"
    if device not in DEVICES:
        raise ValueError(f"device={device!r} is not one of {DEVICES} (from the argument or "
                         f"${DEVICE_ENV})")
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not one of {BACKENDS}")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "cuda" and gpus == 0:
        raise ValueError("device='cuda' but no CUDA GPU is visible to this process")
    if device == "cpu" or gpus == 0:
        return _cpu(backend, stage, "no CUDA GPU is visible" if device != "cpu" else
                    f"the CPU was asked for (device='cpu' or {DEVICE_ENV}=cpu)")
    return _cuda(local_world_size, gpus, backend, stage)


def _cpu(backend: str, stage: bool | None, why: str) -> PlacementDecision:
    if backend == "nccl":
        raise ValueError(f"backend='nccl' needs CUDA GPUs, but the ranks run on the CPU ({why})")
    forced = "; messages staged through host buffers (forced)" if stage else ""
    return PlacementDecision("cpu", "gloo", 0, bool(stage), f"CPU + gloo: {why}{forced}")


def _cuda(ranks: int, gpus: int, backend: str, stage: bool | None) -> PlacementDecision:
    enough = gpus >= ranks
    if backend == "nccl" and not enough:
        raise ValueError(f"backend='nccl' needs one GPU per local rank: {ranks} local ranks but "
                         f"{gpus} GPU(s) visible (NCCL refuses two ranks on one GPU); use "
                         "backend='gloo' or 'auto' to share the GPUs")
    if backend == "nccl" or (backend == "auto" and enough):
        if stage:
            raise ValueError("stage=True with NCCL: NCCL moves GPU memory itself, there is "
                             "nothing to stage")
        return PlacementDecision("cuda", "nccl", ranks, False,
                                 f"CUDA + NCCL: {gpus} GPU(s) for {ranks} rank(s), one each")
    if stage is False:
        raise ValueError("stage=False with gloo on CUDA: gloo moves only host memory, so CUDA "
                         "tensors must be staged through host buffers")
    used = min(gpus, ranks)
    share = (f"{ranks} ranks share {used} GPU(s) round-robin" if not enough
             else f"{ranks} ranks on {used} GPU(s), gloo asked for")
    return PlacementDecision("cuda-shared" if not enough else "cuda", "gloo", used, True,
                             f"CUDA + gloo: {share}; gloo moves only host memory, so every "
                             "message is staged through pinned host buffers")


def exact_mkl_threads() -> None:
    """Make MKL use exactly the thread count torch sets, whatever else the machine runs:
    ``MKL_DYNAMIC`` (on by default) lets it pick fewer at run time, and a GEMM's summation
    order follows the count (oneMKL's reproducibility conditions: a fixed count, dynamic off)."""
    lib = next(Path(torch.__file__).parent.glob("lib/libtorch_cpu.*"), None)
    with contextlib.suppress(OSError, AttributeError, TypeError):  # no MKL in this torch
        ctypes.CDLL(str(lib)).MKL_Set_Dynamic(0)  # the C API, by value


exact_mkl_threads()  # once per process, before any caller or rank computes a reference


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[int]:
    """Run the body with ``torch.set_num_threads(n)``, then restore the previous count."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(old)


@contextlib.contextmanager
def cpu_share(placement: Placement) -> Iterator[int]:
    """Threads for work this process does on the CPU (encoding, decoding): the caller's own
    count, so a reference the caller computes at that count runs the same arithmetic (MKL
    sums a GEMM in an order that depends on its thread count: issue 49). Under torchrun,
    which starts every rank with ``OMP_NUM_THREADS=1`` (right for many ranks busy at once, but
    a 480p decode on one thread takes hours): this host's cores divided among its local
    ranks. Restores the previous count after."""
    from ppdit._spawn_entry import in_torchrun

    before = torch.get_num_threads()
    share = max(1, (os.cpu_count() or 1) // max(1, local_world_size()))
    raise_it = in_torchrun() and not placement.is_cuda and share > before
    with torch_threads(share if raise_it else before) as n:
        yield n


def process_placement(device: str | None = None) -> Placement:
    """Where this process's own work runs (encoding prompts, decoding): under torchrun its
    local rank's device, as its rank's placement would be (eight local ranks loading umT5 on
    ``cuda:0`` would not fit), else the first device of the rule."""
    from ppdit._spawn_entry import in_torchrun

    if not in_torchrun():
        return decide_placement(1, device=device).for_rank(0)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    return decide_placement(local_world_size(), device=device).for_rank(local)


def local_world_size() -> int:
    """Ranks on this host: torchrun's LOCAL_WORLD_SIZE, else the whole world."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
