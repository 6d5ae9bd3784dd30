"""Two hosts on one Linux machine: two network namespaces joined by a veth pair.

Each namespace has its own interfaces, addresses and routes, so a torchrun agent started in
each (``ip netns exec NAME torchrun ...``) sees the other only across the veth link, as two
hosts see each other across a network; ``tc ... tbf rate`` on the link makes it slow like one.
Namespaces need root (``CAP_NET_ADMIN``); ``TwoHosts.unavailable()`` says why they cannot be
made here. Only the namespaces this module makes are touched, and they are deleted on exit
(which deletes the veth pair with them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

SUBNET = "10.213.77"  # private addresses, only inside the namespaces made here


@dataclass
class TwoHosts:
    """Namespaces ``<prefix>0`` and ``<prefix>1`` at ``SUBNET.1`` and ``SUBNET.2``."""

    prefix: str = f"ppdit{os.getpid()}h"
    rate: str | None = None  # e.g. "100mbit": the link shaped with a token bucket (tbf)

    def names(self) -> tuple[str, str]:
        return f"{self.prefix}0", f"{self.prefix}1"

    def address(self, host: int) -> str:
        return f"{SUBNET}.{host + 1}"

    def interface(self, host: int) -> str:
        return f"{self.prefix}v{host}"

    @staticmethod
    def unavailable() -> str | None:
        """Why namespaces cannot be made here, or None."""
        if shutil.which("ip") is None:
            return "no `ip` command (iproute2)"
        if os.geteuid() != 0:
            return "network namespaces need root (CAP_NET_ADMIN)"
        return None

    def __enter__(self) -> TwoHosts:
        a, b = self.names()
        va, vb = self.interface(0), self.interface(1)
        steps = [["netns", "add", a], ["netns", "add", b],
                 ["link", "add", va, "type", "veth", "peer", "name", vb],
                 ["link", "set", va, "netns", a], ["link", "set", vb, "netns", b],
                 ["-n", a, "addr", "add", f"{self.address(0)}/24", "dev", va],
                 ["-n", b, "addr", "add", f"{self.address(1)}/24", "dev", vb],
                 ["-n", a, "link", "set", va, "up"], ["-n", b, "link", "set", vb, "up"],
                 ["-n", a, "link", "set", "lo", "up"], ["-n", b, "link", "set", "lo", "up"]]
        try:
            for step in steps:
                _run(["ip", *step])
            if self.rate is not None:
                for host in (0, 1):
                    self.exec(host, ["tc", "qdisc", "add", "dev", self.interface(host), "root",
                                     "tbf", "rate", self.rate, "burst", "32kbit", "latency",
                                     "50ms"])
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for name in self.names():
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)

    def command(self, host: int, argv: list[str]) -> list[str]:
        """``argv`` run inside host ``host``'s namespace."""
        return ["ip", "netns", "exec", self.names()[host], *argv]

    def exec(self, host: int, argv: list[str]) -> None:
        _run(self.command(host, argv))

    def env(self, host: int) -> dict[str, str]:
        """What a rank on ``host`` needs: gloo bound to the link's interface."""
        return {"GLOO_SOCKET_IFNAME": self.interface(host)}


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): "
                           f"{done.stderr.strip()}")


__all__ = ["SUBNET", "TwoHosts"]
