"""Device and backend, chosen in one place; the few CUDA-only calls live here behind that choice.

Rule: CUDA + NCCL when there is one GPU per local rank, else CPU + gloo. Everything else in
ppdit asks a ``Placement`` instead of calling ``torch.cuda`` itself, so the CPU path used by
the tests and the notebooks is the same code a GPU user runs, minus these guarded calls.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

BACKENDS = ("auto", "gloo", "nccl")


@dataclass(frozen=True)
class Placement:
    """Where one rank computes and how it talks to the others."""

    device: torch.device
    backend: str  # "nccl" or "gloo"

    @property
    def is_cuda(self) -> bool:
        """Whether CUDA-only features (events, streams, graphs) are available on this rank."""
        return self.device.type == "cuda"

    def synchronize(self) -> None:
        """Wait for queued GPU work (a no-op on CPU, where work is already done on return)."""
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def memory_allocated(self) -> int:
        """Bytes held by tensors on this device (GPU only; 0 on CPU, where RSS is the measure)."""
        return torch.cuda.memory_allocated(self.device) if self.is_cuda else 0


def choose_backend(backend: str, local_world_size: int) -> str:
    """Resolve ``"auto"``: NCCL if this host has a GPU for each local rank, else gloo."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not one of {BACKENDS}")
    if backend != "auto":
        if backend == "nccl" and torch.cuda.device_count() < local_world_size:
            raise ValueError(f"backend='nccl' needs one GPU per local rank: {local_world_size} "
                             f"local ranks but {torch.cuda.device_count()} GPUs visible")
        return backend
    enough_gpus = torch.cuda.is_available() and torch.cuda.device_count() >= local_world_size
    return "nccl" if enough_gpus else "gloo"


def placement_for(backend: str, local_rank: int) -> Placement:
    """The device a rank uses under a resolved backend: ``cuda:local_rank`` for NCCL, else CPU."""
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        return Placement(device, backend)
    return Placement(torch.device("cpu"), backend)


def local_world_size() -> int:
    """Ranks on this host: torchrun's LOCAL_WORLD_SIZE, else the whole world."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
