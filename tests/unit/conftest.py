"""The unit lane's guard: a test here starts no process and no rank.

A test that does belongs in ``tests/ranks/`` or ``tests/system/``; starting one here fails the
test with a message that says so, instead of quietly making ``make test-fast`` slow."""

from __future__ import annotations

import multiprocessing.process
import subprocess

import pytest
import torch.distributed as dist


def _refuse(what: str):
    def call(*args, **kwargs):
        raise RuntimeError(f"a unit test started {what}: move it to tests/ranks/ (gloo ranks) "
                           "or tests/system/ (processes)")
    return call


@pytest.fixture(autouse=True)
def no_processes(monkeypatch):
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", _refuse("a process"))
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("a subprocess"))
    monkeypatch.setattr(dist, "init_process_group", _refuse("a process group"))
