"""Two hosts for real: ``torchrun --nnodes 2`` in two network namespaces joined by a veth pair
(``tests.support.netns``), one agent and one rank per host, static rendezvous, gloo bound to
the link by ``GLOO_SOCKET_IFNAME`` (the README's two-host commands, as a user types them).

Skipped with the reason where namespaces cannot be made (not root, no iproute2)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from ppdit import cli
from ppdit.checkpoint.tiny import build_tiny_pipeline
from ppdit.teaching.drill import MARK, marked_processes
from tests.support.netns import TwoHosts

pytestmark = pytest.mark.skipif(TwoHosts.unavailable() is not None,
                                reason=f"two hosts on one machine: {TwoHosts.unavailable()}")

GENERATE = ["--layout", "step", "--ranks", "2", "--frames", "5", "--prompt", "a red ball"]


@pytest.fixture(scope="module")
def hosts():
    with TwoHosts() as h:
        yield h


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_tiny_pipeline(tmp_path_factory.mktemp("two_hosts") / "tiny")


def agent(hosts: TwoHosts, host: int, port: int, token: str, argv: list[str],
          job: str = "generate") -> subprocess.Popen:
    """One torchrun agent (1 rank) in namespace ``host``; rank 0 lives on host 0. A peer is
    declared lost after 4 s without a heartbeat (10 s by default: the test need not wait)."""
    env = {**hosts.env(host), MARK: token, "PPDIT_DEVICE": "cpu", "OMP_NUM_THREADS": "1",
           "PPDIT_LOST_AFTER_S": "4"}
    command = ["env", *(f"{k}={v}" for k, v in env.items()), sys.executable, "-m",
               "torch.distributed.run", "--nnodes", "2", "--node-rank", str(host),
               "--nproc-per-node", "1", "--master-addr", hosts.address(0), "--master-port",
               str(port), "-m", "ppdit", job, *argv]
    return subprocess.Popen(hosts.command(host, command), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=os.getcwd())


def test_step_split_across_two_hosts_equals_one_host(hosts, folder, tmp_path):
    """Each host runs one stage; the handoff crosses the link. The video equals one host's
    single-device run byte for byte (step split runs the same arithmetic), and rank 0 says
    where every rank is and writes the outputs on host 0."""
    token = uuid.uuid4().hex
    argv = ["--checkpoint", str(folder), *GENERATE, "--steps", "4"]
    a = agent(hosts, 0, 29611, token, [*argv, "--out", str(tmp_path / "a")])
    b = agent(hosts, 1, 29611, token, [*argv, "--out", str(tmp_path / "b")])
    out_a, _ = a.communicate(timeout=240)
    out_b, _ = b.communicate(timeout=60)
    assert a.returncode == 0 and b.returncode == 0, out_a + out_b
    assert "2 ranks on 2 hosts" in out_a and hosts.address(1) in out_a
    assert not (tmp_path / "b").exists()  # only rank 0 writes
    single = ["generate", "--checkpoint", str(folder), *GENERATE[:1], "single",
              *GENERATE[4:], "--steps", "4", "--out", str(tmp_path / "one")]
    assert cli.main(single) == 0
    assert (tmp_path / "a" / "video.mp4").read_bytes() == \
        (tmp_path / "one" / "video.mp4").read_bytes()


def test_a_killed_host_ends_the_other_naming_the_lost_rank(hosts, tmp_path):
    """SIGKILL host 1's agent mid-run: its rank follows (it watches its parent); host 0's rank,
    busy with its own stage's steps (nothing to say to rank 1 until the handoff), hears no
    heartbeat (``processes.hosts``), names rank 1 and its address and ends; every process of the
    run is gone within seconds."""
    token = uuid.uuid4().hex
    argv = ["--requests", "1", "--steps", "4000"]  # stage 0 computes 2,000 steps in silence
    a = agent(hosts, 0, 29612, token, [*argv, "--out", str(tmp_path / "a")], "step-split")
    b = agent(hosts, 1, 29612, token, [*argv, "--out", str(tmp_path / "b")], "step-split")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(a.stdout), daemon=True)
    reader.start()
    try:
        _wait_for(lambda: any("ranks on 2 hosts" in line for line in lines), 180)
        time.sleep(2)  # into the denoising
        b.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        a.wait(timeout=60)
        ended_s = time.monotonic() - killed
        reader.join(timeout=10)
        out_a = "".join(lines)
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
    assert a.returncode != 0
    assert "lost contact with host" in out_a and hosts.address(1) in out_a, out_a[-3000:]
    assert "rank(s) 1" in out_a
    assert ended_s < 30, f"host 0 took {ended_s:.1f} s to end"
    deadline = time.monotonic() + 10
    while marked_processes(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marked_processes(token) == {}


def _wait_for(condition, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {limit_s} s")
        time.sleep(0.2)
