"""Pictures of context parallelism (lesson 07): who attends to whose keys at each ring hop, and
which messages of an all-to-all cross the node boundary, flat or in two phases.

Both are drawn from the same index arithmetic the code runs (``ring._post_hop``'s source rank,
``topology.Hierarchy``'s phases), so a picture cannot show a schedule the ranks do not follow."""

from __future__ import annotations

import matplotlib.pyplot as plt


def ring_source(rank: int, hop: int, p: int) -> int:
    """Whose K/V block ``rank`` holds at ``hop`` (0: its own): the block moves one rank on per
    hop, so it came from ``hop`` ranks back (``ring._post_hop``)."""
    return (rank - hop) % p


def plot_ring_schedule(p: int = 4, ax=None, title: str | None = None):
    """A (rank x hop) grid, each cell coloured and labelled by the K/V block that rank attends
    over at that hop: every row meets every colour once, every column holds each colour once
    (no two ranks need the same block at once)."""
    ax = ax or plt.gca()
    colours = plt.get_cmap("tab10")
    for rank in range(p):
        for hop in range(p):
            src = ring_source(rank, hop, p)
            ax.add_patch(plt.Rectangle((hop, rank), 0.94, 0.94, color=colours(src), alpha=0.8))
            ax.text(hop + 0.47, rank + 0.47, f"K/V of\nrank {src}", ha="center", va="center",
                    fontsize=7)
    ax.set(xlim=(0, p), ylim=(p, 0))  # rank 0 on top
    ax.set_xticks([h + 0.47 for h in range(p)], [f"hop {h}" for h in range(p)], fontsize=8)
    ax.set_yticks([r + 0.47 for r in range(p)], [f"rank {r}\n(its queries)" for r in range(p)],
                  fontsize=8)
    ax.set_xlabel("ring step (a K/V block moves one rank on per step, beside the attention)")
    ax.set_title(title or f"Ring attention on {p} ranks: the blocks each rank's queries meet")
    return ax


def crossing_messages(nodes: int, local: int, hierarchical: bool) -> list[tuple[int, int]]:
    """(sender, receiver) pairs of one all-to-all whose message crosses a node boundary.
    Flat: every rank sends to every rank of every other node, (N - 1) L messages each.
    Two-phase (``topology.Hierarchy``): phase 2 sends one message to the same local index on
    each other node, N - 1 each."""
    ranks = range(nodes * local)
    if hierarchical:
        return [(a, b) for a in ranks for b in ranks
                if a // local != b // local and a % local == b % local]
    return [(a, b) for a in ranks for b in ranks if a // local != b // local]


def plot_crossings(nodes: int = 2, local: int = 4, axes=None):
    """Two panels, flat and two-phase: the messages one all-to-all sends across the node
    boundary (red) and inside a node (grey; the two-phase one sends N chunks in each)."""
    axes = plt.subplots(1, 2, figsize=(10, 3.4))[1] if axes is None else axes
    n = nodes * local
    pos = {r: (2 * (r // local), r % local) for r in range(n)}
    for ax, hier in zip(axes, (False, True), strict=True):
        for node in range(nodes):
            ax.add_patch(plt.Rectangle((node * 2 - 0.6, -0.6), 1.2, local + 0.2, color="#eee"))
            ax.text(node * 2, local - 0.25, f"node {node}", ha="center", fontsize=8)
        for r in range(n):  # inside the node: neighbours on an arc, every pair once
            for q in range(r + 1, (r // local + 1) * local):
                x, y0, y1 = pos[r][0], pos[r][1], pos[q][1]
                bend = 0.1 * (y1 - y0) * (1 if x == 0 else -1)
                ax.plot([x, x - bend, x], [y0, (y0 + y1) / 2, y1], color="#999", lw=0.8)
        for a, b in crossing_messages(nodes, local, hier):
            if a < b:  # one line per pair (the reverse message follows the same wire)
                ax.plot(*zip(pos[a], pos[b], strict=True), color="#C44E52", lw=0.8, alpha=0.7)
        ax.scatter(*zip(*pos.values(), strict=True), s=120, color="#4C72B0", zorder=3)
        for r, (x, y) in pos.items():
            ax.text(x, y, str(r), ha="center", va="center", color="white", fontsize=7, zorder=4)
        count = len(crossing_messages(nodes, local, hier))
        ax.set_title(f"{'two-phase' if hier else 'flat'}: {count} messages cross nodes "
                     f"({count // n} per rank)", fontsize=9)
        ax.plot([], [], color="#C44E52", label="message across nodes")
        ax.plot([], [], color="#999", label="message inside a node")
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize=7,
                  frameon=False)
        ax.set(xlim=(-1, 2 * nodes - 1), ylim=(-0.8, local))
        ax.axis("off")
    return axes
