"""Decode overlapped with generation on real gloo ranks equals the same work on one process,
and the streaming decode of it equals diffusers' full decode."""

from __future__ import annotations

import pytest
import torch

from ppdit.parallel.decode_overlap.plan import OverlapPlan
from ppdit.parallel.decode_overlap.run import overlap_reference, run_decode_overlap
from ppdit.sampler import SamplingConfig
from ppdit.vae.streaming import (
    decode_full,
    output_frames,
)
from tests.conftest import CHUNKED_TOL

FAST = SamplingConfig(num_steps=2)


@pytest.fixture(scope="module")
def overlap_run(pools):
    plans = {
        "serial": OverlapPlan(num_chunks=3, sampling=FAST, max_ahead=0, push_frames=1),
        "overlap": OverlapPlan(num_chunks=3, sampling=FAST, max_ahead=2),
        "graph": OverlapPlan(num_chunks=3, sampling=FAST, use_graph_runner=True, warmup=False),
    }
    return run_decode_overlap(plans, rounds=1, timeout_s=300, echo=False, pool=pools(2))


@pytest.mark.parametrize("name", ["serial", "overlap", "graph"])
def test_overlap_equals_one_process(overlap_run, tiny, vae, name):
    res = overlap_run[name]
    latents, video = overlap_reference(tiny, vae, res.plan)
    assert torch.equal(res.latents, latents)  # the generator's chunks, bit for bit
    assert torch.equal(res.video, video)  # decoded the same way, bit for bit
    assert res.video.shape[2] == output_frames(res.plan.latent_frames)
    if res.plan.push_frames == 1:
        assert torch.equal(res.video, decode_full(vae, latents))
    else:
        torch.testing.assert_close(res.video, decode_full(vae, latents), **CHUNKED_TOL)


def test_overlap_trace_shows_decode_beside_generation(overlap_run, no_orphans):
    for name, res in overlap_run.items():
        trace = res.trace
        assert {s.rank for s in trace.select("decode")} == {0}, name
        assert {s.rank for s in trace.select("compute")} == {1}, name
        assert len(trace.select("compute")) == res.plan.num_chunks * FAST.num_steps
        assert len(trace.select("wait", rank=1)) == res.plan.num_credits()

    def overlapping(res) -> bool:
        return any(d.start_ns < c.end_ns and c.start_ns < d.end_ns
                   for d in res.trace.select("decode") for c in res.trace.select("compute"))

    assert overlapping(overlap_run["overlap"])  # chunk k decodes while chunk k + 1 generates
    assert not overlapping(overlap_run["serial"])  # max_ahead=0: strictly one after the other
