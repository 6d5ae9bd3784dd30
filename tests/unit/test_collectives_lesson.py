"""Lesson 04's helpers without ranks: the α-β formulas, the ring/tree crossover, the fit, the
sweep's sizes (the primitives on live ranks: tests/ranks/test_collectives_lesson.py)."""

from __future__ import annotations

import math

import pytest

from ppdit.analysis.alltoall import Link, flat_seconds
from ppdit.analysis.roofline import ring_allreduce_traffic
from ppdit.teaching.collectives.costs import (
    collective_costs,
    fit_alpha_beta,
    links,
    log2_steps,
    ring_allreduce_seconds,
    ring_tree_crossover_bytes,
    tree_allreduce_seconds,
)
from ppdit.teaching.collectives.sweep import SIZES, iterations

LINK = Link(alpha_s=2e-6, beta_bytes_s=100e9)  # α β = 200 kB: round numbers to check by hand


def test_ring_and_tree_at_known_points():
    # ring: 2 (p-1) α + 2 (p-1)/p n/β; p = 8, n = 1 MB: 14 * 2 us + 1.75 * 10 us = 45.5 us
    assert ring_allreduce_seconds(1e6, 8, LINK) == pytest.approx(45.5e-6)
    # tree: 2 log2(p) α + 2 n/β = 6 * 2 us + 2 * 10 us = 32 us
    assert tree_allreduce_seconds(1e6, 8, LINK) == pytest.approx(32e-6)
    assert [log2_steps(p) for p in (2, 3, 4, 8, 9, 512)] == [1, 2, 2, 3, 4, 9]
    # the ring's bytes are the roofline module's 2 (p-1)/p n
    assert collective_costs(1e6, 8)[3].sent == ring_allreduce_traffic(1e6, 8)


def test_the_crossover_separates_tree_wins_from_ring_wins():
    for p in (4, 8, 64, 512):
        for link in (LINK, *links().values()):
            n = ring_tree_crossover_bytes(p, link)
            assert n == pytest.approx(p * link.alpha_s * link.beta_bytes_s
                                      * (p - 1 - math.ceil(math.log2(p))))
            assert ring_allreduce_seconds(n, p, link) == pytest.approx(
                tree_allreduce_seconds(n, p, link))
            assert tree_allreduce_seconds(n / 2, p, link) < ring_allreduce_seconds(n / 2, p, link)
            assert ring_allreduce_seconds(2 * n, p, link) < tree_allreduce_seconds(2 * n, p, link)
    assert ring_tree_crossover_bytes(8, LINK) == pytest.approx(32 * 200e3)  # p (p-1-3) α β
    # two ranks: the same steps, and the ring sends half: it is never slower
    assert ring_tree_crossover_bytes(2, LINK) == 0.0
    assert ring_allreduce_seconds(1e3, 2, LINK) < tree_allreduce_seconds(1e3, 2, LINK)
    with pytest.raises(ValueError, match="ranks >= 2"):
        ring_allreduce_seconds(1e3, 1, LINK)


def test_all_reduce_is_reduce_scatter_plus_all_gather_in_cost():
    for p in (2, 4, 8):
        costs = {c.name: c for c in collective_costs(3e6, p)}
        ar, rs, ag = costs["all-reduce"], costs["reduce-scatter"], costs["all-gather"]
        assert ar.steps == rs.steps + ag.steps and ar.sent == pytest.approx(rs.sent + ag.sent)
        assert ar.seconds(LINK) == pytest.approx(ring_allreduce_seconds(3e6, p, LINK))
        # the all-to-all: (p-1)/p of the buffer, as analysis.alltoall's flat all-to-all inside
        # one node: one message of n/p to each peer in turn, (p-1) (α + n/(p β))
        assert costs["all-to-all"].seconds(LINK) == pytest.approx(
            flat_seconds(3e6 / p, 1, p, LINK, LINK))
        assert costs["all-to-all"].sent == pytest.approx((p - 1) / p * 3e6)
        # bytes per byte of n: nccl-tests' bus-bandwidth factors (doc/PERFORMANCE.md)
        factors = {"all-reduce": 2 * (p - 1) / p, "reduce-scatter": (p - 1) / p,
                   "all-gather": (p - 1) / p, "broadcast": 1, "reduce": 1,
                   "all-to-all": (p - 1) / p}
        for name, factor in factors.items():
            assert costs[name].sent_per_n == pytest.approx(factor), name


def test_the_fit_recovers_alpha_and_beta():
    sizes = [8 * 8**k for k in range(8)]
    exact = fit_alpha_beta(sizes, [150e-6 + n / 3e9 for n in sizes])
    assert exact.alpha_s == pytest.approx(150e-6, rel=1e-9)
    assert exact.beta_bytes_s == pytest.approx(3e9, rel=1e-9)
    assert exact.crossover_bytes == pytest.approx(450e3)
    # +-10% noise on every point, alternating: the relative weights keep both within 10%
    noisy = fit_alpha_beta(sizes, [(150e-6 + n / 3e9) * (1.1 if k % 2 else 0.9)
                                   for k, n in enumerate(sizes)])
    assert noisy.alpha_s == pytest.approx(150e-6, rel=0.1)
    assert noisy.beta_bytes_s == pytest.approx(3e9, rel=0.1)
    with pytest.raises(ValueError, match="distinct sizes"):
        fit_alpha_beta([8, 8], [1e-4, 1e-4])
    with pytest.raises(ValueError, match="positive"):
        fit_alpha_beta([8, 1e6], [1e-3, 1e-4])  # faster for more bytes: no link does that


def test_sweep_iterations_agree_on_both_ranks_and_cover_the_sizes():
    assert SIZES[0] == 8 and SIZES[-1] == 16 << 20
    assert [iterations(n) for n in (8, 1 << 20, 16 << 20)] == [10, 3, 3]
