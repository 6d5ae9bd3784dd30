"""Where a lesson's ranks compute, said in its first output, and a guard on every comparison of
their results with a reference computed in the notebook's kernel.

Why: left to ``decide_placement``'s "auto", a learner's GPU box would put the ranks on CUDA
without a word, and a bit-for-bit check against a reference the kernel computed on the CPU
would print False: other kernels, other rounding, nothing wrong with the layout. So a lesson
keeps its ranks on the CPU (the committed outputs' placement) unless the learner asks for the
GPUs with ``PPDIT_DEVICE=cuda make lab``, and says which at the top (``where_ranks_compute``).
A reference meant for the ranks' results passes through ``same_placement``, which refuses, with
``PlacementMismatch``, when the ranks compute somewhere other than the reference did.
"""

from __future__ import annotations

import os
from typing import TypeVar

import torch

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
              "placement of the committed outputs. Every timing and figure below is from CPU "
              f"ranks; `{SWITCH}` puts the ranks on GPUs.")
    else:
        print(f"Ranks compute on GPUs ({DEVICE_ENV}={os.environ[DEVICE_ENV]}): "
              f"{decision.reason}. Timings and figures below are this machine's, not the "
              "committed ones; a check against a reference computed in this kernel on the CPU "
              "stops with PlacementMismatch (unset the variable to compare on the CPU).")


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
            f"one device says anything about the layout. Compare on one placement: unset "
            f"{DEVICE_ENV} (the lessons run their ranks on the CPU), or take the reference "
            "from a one-device run on a rank")
    return value


def _device_of(value) -> str | None:
    if isinstance(value, torch.Tensor):
        return value.device.type
    if isinstance(value, dict):
        value = list(value.values())
    if not isinstance(value, (list, tuple)):
        return None
    found = {_device_of(v) for v in value} - {None}
    return "several devices" if len(found) > 1 else next(iter(found), None)
