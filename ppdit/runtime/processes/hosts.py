"""Ranks on several hosts (``torchrun --nnodes N``): who is where, a join that says why it
waits, and a lost peer named by rank and host.

What goes wrong across hosts is rarely ppdit's arithmetic but the network, and the layers below
say it poorly: a hostname resolving to loopback makes gloo dial 127.0.0.1 and everyone waits
silently for the group timeout; a dead node shows up as ``Connection reset by peer
[192.168.77.2]`` with no rank in it. So:

* ``agree_on_backend`` checks, before the group forms, that every node chose the same backend;
* ``joining`` prints, after ``JOIN_HINT_S`` of waiting, what this rank waits for and the usual
  fixes (``join_hint``); ``who_is_where`` gathers every rank's host and address;
* ``lost_peer`` turns a communication error into "lost rank 1 on host h (192.168.77.2)";
* ``watch_peers`` notices a host that died while this rank had nothing to say to it: every rank
  bumps a counter in the rendezvous store each ``BEAT_S``; a peer whose counter stands still
  for ``LOST_AFTER_S`` (or a store that stops answering) is named, and this rank exits.
  Counters, not clocks: the hosts' clocks need not agree.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist

JOIN_HINT_S = 30.0  # a join slower than this on a LAN is stuck, not slow
BEAT_S = 0.5
# a busy rank still beats (the thread needs the GIL only briefly); PPDIT_LOST_AFTER_S overrides
LOST_AFTER_S = float(os.environ.get("PPDIT_LOST_AFTER_S", "10"))
_ADDRESS = re.compile(r"\b(\d{1,3}(?:\.\d{1,3}){3})\b")
_LOST = ("Connection reset by peer", "Connection closed by peer", "Broken pipe",
         "Connection refused", "NCCL communicator was aborted", "Socket Timeout")


@dataclass(frozen=True)
class Peer:
    """One rank's place on the network."""

    rank: int
    host: str  # its hostname
    address: str  # the address its host uses towards the rendezvous (MASTER_ADDR)
    node: int  # torchrun's GROUP_RANK (the node index), -1 if unknown


def local_address(master: str | None = None, port: int | None = None) -> str:
    """The address of the interface this host uses to reach ``master`` (no packet is sent:
    a UDP socket is only connected, which picks the route)."""
    master = master or os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = port or int(os.environ.get("MASTER_PORT", "29500"))
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((master, port))
        return s.getsockname()[0]
    return "unknown"


def who_is_where(rank: int, world: int) -> list[Peer]:
    """Every rank's ``Peer``, on every rank (an all-gather of small objects: collective)."""
    peers: list[Peer | None] = [None] * world
    me = Peer(rank, socket.gethostname(), local_address(), int(os.environ.get("GROUP_RANK", "-1")))
    dist.all_gather_object(peers, me)
    return [p for p in peers if p is not None]


def lost_peer(error: BaseException, peers: list[Peer], rank: int) -> str | None:
    """A sentence naming the rank(s) and host a communication error lost, or None when the
    error is not a lost connection."""
    text = f"{error}"
    if not any(marker in text for marker in _LOST):
        return None
    mine = next((p for p in peers if p.rank == rank), None)
    seen = set(_ADDRESS.findall(text))
    far = [p for p in peers if p.rank != rank and p.address in seen]
    if not far:  # no address in the message: every rank on another host is a suspect
        far = [p for p in peers if mine is None or p.address != mine.address]
    return f"{_lost_sentence(rank, far)} (the error below is the transport's)" if far else None


def _lost_sentence(rank: int, far: list[Peer]) -> str:
    return (f"ppdit: rank {rank} lost contact with {_where(far)}. That node's processes ended "
            f"or its network failed; this rank stops too")


def several_hosts(peers: list[Peer]) -> bool:
    """Whether the ranks span more than one host (address)."""
    return len({p.address for p in peers}) > 1


def where_sentence(peers: list[Peer]) -> str | None:
    """Where every rank is and where rank 0 (the outputs) is; None on one host."""
    if not several_hosts(peers):
        return None
    hosts = len({p.address for p in peers})
    return (f"ppdit: {len(peers)} ranks on {hosts} hosts: {_where(peers)}. Rank 0 writes the "
            f"outputs on {peers[0].host} ({peers[0].address}).")


def _where(peers: list[Peer]) -> str:
    """ "host h (address, node n): rank(s) 0, 1; ..." by host."""
    hosts = sorted({(p.node, p.host, p.address) for p in peers})
    return "; ".join(f"host {h} ({a}{f', node {n}' if n >= 0 else ''}): rank(s) "
                     f"{', '.join(str(p.rank) for p in peers if p.address == a)}"
                     for n, h, a in hosts)


def _store(timeout_s: float) -> dist.TCPStore:
    """A client of torchrun's rendezvous store (the agent on node 0 hosts it)."""
    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                         timeout=timedelta(seconds=timeout_s), wait_for_workers=False)


def _key(name: str) -> str:
    """A store key of this run and restart (the agent's store outlives a restart)."""
    run = os.environ.get("TORCHELASTIC_RUN_ID", "")
    return f"ppdit/{run}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{name}"


def agree_on_backend(backend: str, rank: int, world: int, timeout_s: float = 60.0) -> None:
    """Every rank publishes its backend and host in the rendezvous store and checks that all
    agree (a node with GPUs picks NCCL, one without gloo: the group would then never form, or
    fail with a transport error naming nobody)."""
    store = _store(timeout_s)
    store.set(_key(f"backend/{rank}"), f"{backend} {socket.gethostname()}")
    keys = [_key(f"backend/{r}") for r in range(world)]
    store.wait(keys, timedelta(seconds=timeout_s))
    check_backends([store.get(k).decode() for k in keys])


def check_backends(entries: list[str]) -> None:
    """``entries[rank]`` = "backend host": raise ``RuntimeError`` naming who differs."""
    chosen = [e.split(" ", 1) for e in entries]
    if len({b for b, _ in chosen}) > 1:
        who = "; ".join(f"rank {r} on {h}: {b}" for r, (b, h) in enumerate(chosen))
        raise RuntimeError(f"ppdit: the ranks chose different backends ({who}). Every node must "
                           "agree: give PPDIT_DEVICE the same value on every host (cpu: gloo "
                           "everywhere; cuda: NCCL, a GPU per rank on every host)")


def watch_peers(peers: list[Peer], rank: int, beat_s: float = BEAT_S,
                lost_after_s: float = LOST_AFTER_S) -> threading.Event | None:
    """Start the heartbeat thread on several hosts (None on one host: the local agent
    watches its own workers). Set the returned event to stop it."""
    if not several_hosts(peers):
        return None
    stop = threading.Event()
    threading.Thread(target=_beat, args=(peers, rank, beat_s, lost_after_s, stop),
                     name="ppdit-heartbeat", daemon=True).start()
    return stop


def _beat(peers: list[Peer], rank: int, beat_s: float, lost_after_s: float,
          stop: threading.Event) -> None:
    store = _store(lost_after_s)
    keys = {p.rank: _key(f"beat/{p.rank}") for p in peers}
    seen = {p.rank: (-1, time.monotonic()) for p in peers if p.rank != rank}
    while not stop.wait(beat_s):
        try:
            store.add(keys[rank], 1)
            for r in seen:
                count = store.add(keys[r], 0)
                if count != seen[r][0]:
                    seen[r] = (count, time.monotonic())
        except Exception as e:  # the store's host (node 0) is gone
            if stop.is_set():  # ... after this rank's work ended: node 0 finished first
                return
            _give_up(f"{_lost_sentence(rank, [p for p in peers if p.rank == 0])} (the "
                     f"rendezvous store on it stopped answering: {e})")
        lost = [p for p in peers if p.rank in seen
                and time.monotonic() - seen[p.rank][1] > lost_after_s]
        if lost:
            _give_up(f"{_lost_sentence(rank, lost)} (no heartbeat for {lost_after_s:.0f} s)")


def _give_up(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
    os._exit(1)  # the main thread may be computing for minutes: end the rank now


@contextlib.contextmanager
def joining(rank: int, world: int, hint_s: float = JOIN_HINT_S) -> Iterator[None]:
    """Say what this rank waits for if forming the process group takes over ``hint_s``."""
    done = threading.Event()

    def hint() -> None:
        if not done.wait(hint_s):
            print(join_hint(rank, world, hint_s), file=sys.stderr, flush=True)

    threading.Thread(target=hint, name="ppdit-join-hint", daemon=True).start()
    try:
        yield
    finally:
        done.set()


def join_hint(rank: int, world: int, waited_s: float) -> str:
    """The message of a join that has waited ``waited_s``."""
    master = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
    ifname = os.environ.get("GLOO_SOCKET_IFNAME")
    return (f"ppdit: rank {rank} of {world} has waited {waited_s:.0f} s to form the process "
            f"group at {master} (this host: {socket.gethostname()}, {local_address()}). On "
            f"several hosts check: every node runs the same --nnodes, --master-addr and "
            f"--master-port (static rendezvous) and can reach that address; "
            f"GLOO_SOCKET_IFNAME names the interface facing the other nodes (now: "
            f"{ifname or 'unset'}: gloo then uses the address the hostname resolves to, "
            f"often 127.0.0.1); with --rdzv-backend c10d, the host node gets "
            f"--rdzv-conf is_host=1 and --local-addr its reachable address.")
