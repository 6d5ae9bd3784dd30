"""Where a lesson's ranks compute, said in its first output, and where the references their
results are compared with are computed: on the same kind of device.

Why: left to ``decide_placement``'s "auto", a learner's GPU box would put the ranks on CUDA
without a word, and a bit-for-bit check against a reference the kernel computed on the CPU
would print False: other kernels, other rounding, nothing wrong with the layout. So a lesson
keeps its ranks on the CPU (the committed outputs' placement) unless the learner asks for the
GPUs with ``PPDIT_DEVICE=cuda make lab``, and says which at the top (``where_ranks_compute``).
A reference is computed by ``on_ranks_device(lambda device: ...)``: the device is the helper's
to give, the ranks' own, and a result found elsewhere is refused (``same_placement``) with
``PlacementMismatch``. So the same lesson checks CPU ranks against the CPU and GPU ranks
against the GPU, and cannot compare across the two.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

import torch
from torch.utils._pytree import tree_map_only

from ppdit.runtime.device import DEVICE_ENV, decide_placement

SWITCH = f"{DEVICE_ENV}=cuda make lab"  # the one documented way to put a lesson's ranks on GPUs
T = TypeVar("T")


class PlacementMismatch(ValueError):
    """A rank's result compared with a reference computed on another kind of device."""


def where_ranks_compute() -> None:
    """Keep the ranks on the CPU unless ``$PPDIT_DEVICE`` asks otherwise; print where they
    compute and what that means for the lesson's numbers (a lesson's first output)."""
    os.environ.setdefault(DEVICE_ENV, "cpu")
    decision = decide_placement(2)
    if decision.kind == "cpu":
        print("Ranks compute on the CPU and talk through gloo: the lessons' default, the "
              "placement of the committed outputs. Every live timing and figure below is "
              "measured here, on the CPU; a number measured on GPUs is quoted with its source "
              "(a run committed under gpu_runs/, labelled with its GPU and torch build, or the "
              f"earlier report). `{SWITCH}` puts the ranks on GPUs.")
    else:
        print(f"Ranks compute on GPUs ({DEVICE_ENV}={os.environ[DEVICE_ENV]}): "
              f"{decision.reason}. Live timings and figures below are this machine's, not the "
              "committed ones; each check computes its reference on a GPU too "
              "(on_ranks_device), so GPU results are compared with GPU results (unset the "
              "variable for the committed outputs' CPU placement).")


def ranks_device() -> str:
    """The device type this kernel's launches give their ranks ("cpu" or "cuda")."""
    return "cpu" if decide_placement(2).kind == "cpu" else "cuda"


def same_placement(value: T) -> T:
    """``value`` (a tensor, or a dict / list / tuple of them), computed in this kernel to be
    compared with ranks' results, once it is certain both were computed on one kind of device;
    otherwise ``PlacementMismatch`` names both (equal bits across devices mean nothing)."""
    ranks, here = ranks_device(), _device_of(value)
    if here not in (None, ranks):
        raise PlacementMismatch(
            f"the ranks compute on {ranks} but this reference was computed on {here}: other "
            "kernels round differently, so neither bitwise equality nor a tolerance measured on "
            f"one device says anything about the layout. Compute the reference with "
            "on_ranks_device(lambda device: ...), on the device it hands you")
    return value


def on_ranks_device(compute: Callable[[torch.device], T]) -> T:
    """``compute(device)`` in this kernel on the kind of device the ranks compute on: a
    reference for their results, returned on the CPU beside them (the ranks send theirs there).
    The device is this function's to give, so no lesson can leave its reference on the CPU
    while the ranks use GPUs: a result found elsewhere is ``PlacementMismatch``. On the CPU
    nothing moves (``.cpu()`` of a CPU tensor is that tensor)::

        ref = on_ranks_device(lambda device: generate(build_model("tiny", device=device), r))
    """
    value = same_placement(compute(torch.device(ranks_device())))
    return tree_map_only(torch.Tensor, lambda t: t.cpu(), value)


def _device_of(value) -> str | None:
    if isinstance(value, torch.Tensor):
        return value.device.type
    if isinstance(value, dict):
        value = list(value.values())
    if not isinstance(value, (list, tuple)):
        return None
    found = {_device_of(v) for v in value} - {None}
    return "several devices" if len(found) > 1 else next(iter(found), None)
