"""Envelope and result contracts: round trips, versions, forward compatibility, queues."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ppdit.serve.protocol import (
    FIELD_IDS,
    VERSION,
    PPEnvelopeV1,
    PPResultV1,
    ProtocolError,
    decode,
    encode,
)
from ppdit.serve.queues import BoundedQueue, Deduplicator, QueueEmpty, QueueFull

ids = st.integers(min_value=0, max_value=2**40)
small = st.integers(min_value=0, max_value=10_000)
shapes = st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=5)


@st.composite
def tensors(draw):
    shape = tuple(draw(shapes))
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16, torch.int64]))
    seed = draw(st.integers(0, 1000))
    return (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 10).to(dtype)


@st.composite
def envelopes(draw):
    return PPEnvelopeV1(
        request_id=draw(ids), epoch=draw(small), seq=draw(small), chunk_index=draw(small),
        kind=draw(st.sampled_from(["generate", "hard_cut", "shutdown"])),
        num_steps=draw(small), seed=draw(ids),
        conditioning=draw(st.none() | tensors()), noise=draw(st.none() | tensors()),
        context_frames_override=draw(st.none() | tensors()))


def _same(a, b):
    assert type(a) is type(b)
    for name in ("request_id", "epoch", "seq", "chunk_index"):
        assert getattr(a, name) == getattr(b, name)
    for name in ("conditioning", "noise", "context_frames_override", "latent", "timings"):
        x, y = getattr(a, name, None), getattr(b, name, None)
        assert (x is None) == (y is None)
        if x is not None:
            assert x.dtype == y.dtype and torch.equal(x, y)


@settings(max_examples=60, deadline=None)
@given(envelopes())
def test_envelopes_round_trip(env):
    back = decode(*encode(env))
    _same(env, back)
    assert (back.kind, back.num_steps, back.seed, back.key) == (env.kind, env.num_steps,
                                                                 env.seed, env.key)


@settings(max_examples=40, deadline=None)
@given(ids, small, small, small, st.none() | tensors(), st.none() | tensors())
def test_results_round_trip(rid, epoch, seq, chunk, latent, timings):
    res = PPResultV1(rid, epoch, seq, chunk, latent=latent, timings=timings)
    _same(res, decode(*encode(res)))


def test_unknown_version_names_both_versions():
    header, payloads = encode(PPEnvelopeV1(1, 0, 0, 0), version=VERSION + 1)
    with pytest.raises(ProtocolError, match=rf"version {VERSION + 1} but this reader speaks "
                                            rf"version {VERSION}"):
        decode(header, payloads)


def test_unknown_optional_fields_are_ignored():
    """A newer writer adds field 77; this reader keeps the rest and sets 77 aside."""
    cond = torch.ones(1, 2, 3)
    env = PPEnvelopeV1(5, 1, 2, 3, conditioning=cond, extra={77: torch.arange(4)})
    back = decode(*encode(env))
    assert torch.equal(back.conditioning, cond)
    assert 77 not in FIELD_IDS.values() and torch.equal(back.extra[77], torch.arange(4))


def test_bad_magic_and_field_count_are_errors():
    header, payloads = encode(PPEnvelopeV1(1, 0, 0, 0, conditioning=torch.zeros(1)))
    broken = header.clone()
    broken[0] = 123
    with pytest.raises(ProtocolError, match="not a ppdit message"):
        decode(broken, payloads)
    with pytest.raises(ProtocolError, match="lists 1 payload fields but 0 arrived"):
        decode(header, [])
    for slot, what in ((2, "type"), (3, "kind")):  # -1 would have read the tuple's last name
        for code in (-1, 9):
            broken = header.clone()
            broken[slot] = code
            with pytest.raises(ProtocolError, match=f"header {what} code {code} is not one of"):
                decode(broken, payloads)


@pytest.mark.parametrize("kwargs,match", [
    ({"kind": "pause"}, "kind='pause' is not one of"),
    ({"seq": -1}, "must be >= 0"),
])
def test_bad_envelopes(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PPEnvelopeV1(**{"request_id": 0, "epoch": 0, "seq": 0, "chunk_index": 0, **kwargs})


def test_bounded_queue_blocks_offers_and_times_out():
    q = BoundedQueue("D_IN", capacity=2)
    q.put(1)
    assert q.offer(2) is True and q.offer(3) is False  # told "full", nothing lost
    with pytest.raises(QueueFull, match="stayed full \\(2 items\\)"):
        q.put(4, timeout_s=0.1)
    assert [q.get(), q.get()] == [1, 2]
    with pytest.raises(QueueEmpty):
        q.get(timeout_s=0.05)
    assert q.max_depth == 2


def test_slow_consumer_backpressure_keeps_depth_bounded_and_loses_nothing():
    q = BoundedQueue("D_OUT", capacity=3)
    got = []

    def consumer():
        for _ in range(20):
            got.append(q.get(timeout_s=5))
            time.sleep(0.005)  # slower than the producer

    t = threading.Thread(target=consumer)
    t.start()
    for i in range(20):
        q.put(i, timeout_s=5)
    t.join(timeout=10)
    assert got == list(range(20)) and q.max_depth <= 3 and q.blocked_s > 0


def test_remove_takes_out_matches_and_keeps_the_rest_in_order():
    q = BoundedQueue("x", 4)
    for key in ((0, 0), (0, 1), (1, 2), (0, 3)):
        q.put(key)
    assert q.remove(lambda k: k[0] == 0) == 3 and len(q) == 1
    assert q.get() == (1, 2)
    q.put("a")
    q.put("b")
    assert q.remove(lambda k: k == "zzz") == 0 and [q.get(), q.get()] == ["a", "b"]


def test_deduplicator_passes_each_key_once_and_forgets_old_epochs():
    d = Deduplicator()
    assert d.first_time((1, 0, 0)) and not d.first_time((1, 0, 0)) and d.duplicates == 1
    assert d.first_time((1, 1, 0))
    d.forget_before(1)
    assert d.first_time((1, 0, 0))  # forgotten: older epochs are filtered elsewhere
