"""What ranks on several hosts say (``runtime.processes.hosts``), without the hosts: the messages
of a lost peer, a slow join and a backend mismatch. The real thing runs in
``test_two_hosts.py`` (network namespaces)."""

from __future__ import annotations

import pytest

from ppdit.runtime.processes.hosts import Peer, check_backends, join_hint, lost_peer

PEERS = [Peer(0, "a", "10.0.0.1", 0), Peer(1, "a", "10.0.0.1", 0), Peer(2, "b", "10.0.0.2", 1)]


def test_a_lost_connection_names_the_rank_and_host_it_lost():
    gloo = RuntimeError("[pair.cc:534] Connection closed by peer [10.0.0.2]:41234")
    message = lost_peer(gloo, PEERS, rank=0)
    assert message is not None
    assert "rank 0 lost contact with host b (10.0.0.2, node 1): rank(s) 2" in message
    # no address in the error: every rank on another host is a suspect, none on mine
    blind = lost_peer(RuntimeError("Connection reset by peer"), PEERS, rank=0)
    assert "rank(s) 2" in blind and "rank(s) 0" not in blind and "rank(s) 1" not in blind
    assert lost_peer(ValueError("shape mismatch"), PEERS, rank=0) is None


def test_a_slow_join_says_what_to_check(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    hint = join_hint(1, 2, 30)
    assert "rank 1 of 2 has waited 30 s" in hint and "10.0.0.1:29500" in hint
    assert "GLOO_SOCKET_IFNAME" in hint and "now: unset" in hint and "--local-addr" in hint


def test_nodes_that_chose_different_backends_are_named():
    check_backends(["gloo a", "gloo b"])
    with pytest.raises(RuntimeError, match="rank 0 on a: nccl; rank 1 on b: gloo"):
        check_backends(["nccl a", "gloo b"])
