"""The all-to-all across two hosts: flat vs topology-aware (CoCoDiff's TAPA), next to α-β.

    sudo python benchmarks/two_hosts.py              # ~2 min on 2 cores; needs root
    sudo python benchmarks/two_hosts.py --rate 1gbit

Two network namespaces joined by a veth pair (``tests.support.netns``), the link shaped with a
token bucket (``tbf``; this kernel has no ``netem``, so latency lives in the model, not the
link), one torchrun agent per "host" with 2 ranks each: 4 ranks as 2 nodes x 2. Every rank
times a flat ``all_to_all_single`` and the two-phase one (``parallel.sequence.topology``) on
the same data, interleaved round by round, at a latency-bound and a bandwidth-bound size, and
checks the two results are equal bit for bit. Also runs one host's 4 ranks (no link) as the
baseline. Prints medians with their spread and the α-β prediction: the link's bytes over its
rate, plus a latency term per message that crosses it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SIZES = (4 * 1024, 512 * 1024)  # bytes per chunk (one rank's share for one other rank)
ROUNDS = 7
ALPHA_S = 100e-6  # per message across the link: a TCP round trip on a LAN, order of magnitude


def worker(out: str) -> None:
    """One rank of the measurement (run by torchrun)."""
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    from ppdit.parallel.layout import Layout
    from ppdit.parallel.sequence.topology import hierarchy

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    hier = hierarchy(Layout(ulysses=world).mesh(ranks_per_node=2).build(rank))
    rows = {}
    for size in SIZES:
        n = size // 4
        x = torch.arange(world * n, dtype=torch.float32) + rank * 1e6
        sizes = [[n] * world for _ in range(world)]
        flat_s, hier_s = [], []
        for _ in range(ROUNDS):
            dist.barrier()
            t = time.perf_counter()  # both through funcol, as Ulysses calls them
            flat = funcol.wait_tensor(funcol.all_to_all_single(x, [n] * world, [n] * world,
                                                               dist.group.WORLD))
            flat_s.append(time.perf_counter() - t)
            dist.barrier()
            t = time.perf_counter()
            two = hier.all_to_all(x.view(-1, 1), sizes).view(-1)
            hier_s.append(time.perf_counter() - t)
            assert torch.equal(flat, two), "hierarchical != flat"
        rows[size] = {"flat": flat_s, "hierarchical": hier_s}
    gathered = [None] * world
    dist.all_gather_object(gathered, rows)
    if rank == 0:
        Path(out).write_text(json.dumps(gathered))
    dist.destroy_process_group()


def torchrun(nnodes: int, node: int, master: str, port: int, out: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes),
            "--node-rank", str(node), "--nproc-per-node", str(4 // nnodes), "--master-addr",
            master, "--master-port", str(port), __file__, "--worker", out]


def measure(rate: str | None, out: Path) -> dict:
    """Run the worker on two namespaces (or one host when ``rate`` is "local")."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' helpers
    from tests.support.netns import TwoHosts

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if rate == "local":
        subprocess.run(torchrun(1, 0, "127.0.0.1", 29711, str(out)), env=env, check=True,
                       capture_output=True)
        return _medians(json.loads(out.read_text()))
    with TwoHosts(rate=rate) as hosts:
        procs = [subprocess.Popen(hosts.command(h, ["env", *(f"{k}={v}" for k, v in
                                                           hosts.env(h).items()),
                                                  *torchrun(2, h, hosts.address(0), 29712,
                                                            str(out))]),
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for h in (0, 1)]
        for p in procs:
            if p.wait(timeout=600):
                raise RuntimeError(p.stderr.read().decode()[-2000:])
    return _medians(json.loads(out.read_text()))


def _medians(per_rank: list[dict]) -> dict:
    """Per size and variant: the slowest rank's time per round, then median and spread."""
    out = {}
    for size in per_rank[0]:
        for variant in ("flat", "hierarchical"):
            rounds = [max(r[size][variant][i] for r in per_rank) for i in range(ROUNDS)][1:]
            out[(int(size), variant)] = (statistics.median(rounds), min(rounds), max(rounds))
    return out


def predict(size: int, rate_bit_s: float) -> dict[str, float]:
    """α-β (``ppdit.analysis.alltoall``) for 2 nodes x 2 ranks: the two ranks of a host share
    its link (half the rate each); inside a host the copies are taken as free."""
    from ppdit.analysis.alltoall import Link, flat_seconds, two_phase_seconds

    intra, inter = Link(0.0, float("inf")), Link(ALPHA_S, rate_bit_s / 8 / 2)
    return {"flat": flat_seconds(size, 2, 2, intra, inter),
            "hierarchical": two_phase_seconds(size, 2, 2, intra, inter)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker")
    ap.add_argument("--rate", default="100mbit")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker)
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' helpers
    from tests.support.netns import TwoHosts

    if TwoHosts.unavailable():
        print(f"cannot make two hosts here: {TwoHosts.unavailable()}")
        return 1
    scratch = Path("/tmp") / f"ppdit_two_hosts_{os.getpid()}.json"
    results = {name: measure(rate, scratch) for name, rate in
               (("one host", "local"), ("two hosts", None), (f"link {a.rate}", a.rate))}
    rate = float(a.rate.rstrip("mgbit") or 0) * (1e9 if "gbit" in a.rate else 1e6)
    print(f"all-to-all over 4 ranks (2 hosts x 2), gloo, median of {ROUNDS - 1} rounds "
          "[min, max], ms")
    print(f"{'chunk':>8} {'where':>14} {'flat':>22} {'hierarchical':>22} {'α-β flat':>9} "
          f"{'α-β hier':>9}")
    for size in SIZES:
        p = predict(size, rate)
        for name, res in results.items():
            f, h = res[(size, "flat")], res[(size, "hierarchical")]
            pred = (f"{p['flat'] * 1e3:9.2f} {p['hierarchical'] * 1e3:9.2f}"
                    if name.startswith("link") else "")
            print(f"{size // 1024:>6}kB {name:>14} {_ms(f):>22} {_ms(h):>22} {pred}")
    if a.json:
        a.json.write_text(json.dumps({k: {f"{s}/{v}": t for (s, v), t in r.items()}
                                      for k, r in results.items()}, indent=2))
    return 0


def _ms(t: tuple[float, float, float]) -> str:
    return f"{t[0] * 1e3:.2f} [{t[1] * 1e3:.2f}, {t[2] * 1e3:.2f}]"


if __name__ == "__main__":
    sys.exit(main())
