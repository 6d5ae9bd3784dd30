"""Timing, tracing and memory tracking synchronise the rank's stream, never the whole device.

A posted NCCL receive is a kernel spinning on NCCL's own stream: ``cudaDeviceSynchronize``
waits for it, and so for a sender that may be waiting for this rank (decode overlap's serial
baseline and PP x TP with one frame in flight hung that way; ``tests/ranks/test_nccl_rules.py``
reproduces both on CPU ranks). Here the CUDA calls are faked, so the rule is checked without a
GPU: a device-wide sync fails the test.
"""

from __future__ import annotations

import pytest
import torch

from ppdit.runtime.device import Placement
from ppdit.runtime.observe.memory import track_peak_memory
from ppdit.runtime.observe.timing import timed
from ppdit.runtime.observe.trace import Tracer


class _Stream:
    def __init__(self, calls: list[str]):
        self.calls = calls

    def synchronize(self) -> None:
        self.calls.append("stream")


def _fake_cuda(monkeypatch, calls: list[str]) -> None:
    class Event:
        def __init__(self, enable_timing: bool = False):
            pass

        def record(self) -> None:
            pass

        def synchronize(self) -> None:
            calls.append("event")

        def elapsed_time(self, other) -> float:
            return 1.0

    def device_wide(*args):
        raise AssertionError("a device-wide sync: it would wait for posted NCCL receives")

    monkeypatch.setattr(torch.cuda, "synchronize", device_wide)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: _Stream(calls))
    monkeypatch.setattr(torch.cuda, "Event", Event)
    for name in ("reset_peak_memory_stats", "memory_allocated", "max_memory_allocated"):
        monkeypatch.setattr(torch.cuda, name, lambda *a: 0)


def test_timing_tracing_and_memory_sync_only_the_stream(monkeypatch):
    calls: list[str] = []
    _fake_cuda(monkeypatch, calls)
    gpu = Placement(torch.device("cuda", 0), "nccl")
    with timed(gpu) as t:
        t.lap()
    tracer = Tracer(0, gpu)
    with tracer.span("compute", "a", gpu=True), tracer.span("compute", "b", gpu=True):
        pass
    tracer.finish()
    with track_peak_memory(gpu):
        pass
    assert "stream" in calls and "event" in calls


def test_a_device_wide_sync_is_asked_for_by_name(monkeypatch):
    _fake_cuda(monkeypatch, [])
    with pytest.raises(AssertionError, match="device-wide"):
        Placement(torch.device("cuda", 0), "nccl").synchronize(device_wide=True)
