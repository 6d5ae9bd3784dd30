"""The α-β all-to-all model (analysis.alltoall) and the pictures of lesson 07 (viz.sequence)."""

import pytest

from ppdit.analysis.alltoall import Link, crossover_bytes, flat_seconds, two_phase_seconds
from ppdit.viz.sequence import crossing_messages, ring_source

NVLINK, IB = Link(3e-6, 450e9), Link(5e-6, 50e9)


def test_flat_is_the_slower_of_its_two_links():
    # 2 nodes x 4: 3 intra messages, 4 inter messages of 1 MB each
    assert flat_seconds(1e6, 2, 4, NVLINK, IB) == pytest.approx(4 * (5e-6 + 1e6 / 50e9))
    slow_intra = Link(1e-3, 1e9)
    assert flat_seconds(1e6, 2, 4, slow_intra, IB) == pytest.approx(3 * (1e-3 + 1e6 / 1e9))


def test_two_phase_is_phase_one_then_phase_two():
    want = 3 * (3e-6 + 2 * 1e6 / 450e9) + 1 * (5e-6 + 4 * 1e6 / 50e9)
    assert two_phase_seconds(1e6, 2, 4, NVLINK, IB) == pytest.approx(want)


def test_two_phase_wins_small_chunks_and_loses_large_ones_at_the_crossover():
    cross = crossover_bytes(2, 4, NVLINK, IB)
    # two nodes: (L - 1) inter latencies saved against (L - 1) intra messages of 2 chunks
    assert cross == pytest.approx((5e-6 - 3e-6) * 450e9 / 2, rel=1e-6)
    for m, two_phase_faster in ((cross / 2, True), (cross * 2, False)):
        faster = two_phase_seconds(m, 2, 4, NVLINK, IB) < flat_seconds(m, 2, 4, NVLINK, IB)
        assert faster is two_phase_faster


def test_no_crossover_when_one_design_always_wins():
    free_inside = Link(0.0, float("inf"))
    assert crossover_bytes(2, 4, free_inside, IB) is None  # phase 1 costs nothing


@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_every_rank_meets_every_block_once_and_no_two_ranks_share_one(p):
    for rank in range(p):
        assert sorted(ring_source(rank, hop, p) for hop in range(p)) == list(range(p))
    for hop in range(p):
        assert sorted(ring_source(rank, hop, p) for rank in range(p)) == list(range(p))


@pytest.mark.parametrize(("nodes", "local"), [(2, 2), (2, 4), (4, 8)])
def test_crossing_counts(nodes, local):
    n = nodes * local
    assert len(crossing_messages(nodes, local, False)) == n * (nodes - 1) * local
    hier = crossing_messages(nodes, local, True)
    assert len(hier) == n * (nodes - 1)
    assert all(a % local == b % local and a // local != b // local for a, b in hier)
