"""Causal chunked generation: the KV cache path against a full-sequence block-causal forward,
and recompute from context_frames_override against the cache built while generating."""

from __future__ import annotations

import pytest
import torch

from ppdit.model import build_model
from ppdit.sampler import Request, prompt_embeddings
from ppdit.serve.causal import (
    CAUSAL_TOL,
    ChunkGenerator,
    StreamConfig,
    chunk_forward,
    chunk_noise,
    full_sequence_reference,
)

CFG = StreamConfig(chunk_frames=2)
TEXT = prompt_embeddings(Request(0, 5), "tiny")


@pytest.fixture
def gen():
    torch.set_num_threads(1)
    return ChunkGenerator(build_model("tiny", seed=0), CFG)


def test_cached_chunk_equals_one_block_causal_forward(gen):
    chunks = [gen.generate(k, 5, TEXT) for k in range(3)]
    context = torch.cat(chunks, dim=2)
    x = chunk_noise(5, 3, CFG.chunk_shape())
    with torch.no_grad():
        cached = chunk_forward(gen.model, x, torch.tensor([700.0]), TEXT, 6)
    full = full_sequence_reference(gen.model, context, x, 700.0, TEXT)
    torch.testing.assert_close(cached, full, **CAUSAL_TOL)
    # and the context matters: without it the chunk comes out differently
    gen.reset()
    with torch.no_grad():
        alone = chunk_forward(gen.model, x, torch.tensor([700.0]), TEXT, 6)
    assert (alone - cached).abs().max() > 1e-3


def test_recompute_from_override_equals_the_cache_built_by_generation(gen):
    chunks = [gen.generate(k, 5, TEXT) for k in range(3)]
    other = ChunkGenerator(build_model("tiny", seed=0), CFG)
    other.rebuild(torch.cat(chunks, dim=2), TEXT)
    assert len(other.cache.chunks) == len(gen.cache.chunks) == 3
    for a, b in zip(gen.cache.chunks, other.cache.chunks, strict=True):
        for (ka, va), (kb, vb) in zip(a, b, strict=True):
            assert torch.equal(ka, kb) and torch.equal(va, vb)
    assert torch.equal(gen.generate(3, 5, TEXT), other.generate(3, 5, TEXT))


def test_rolling_window_keeps_the_last_chunks():
    g = ChunkGenerator(build_model("tiny", seed=0), StreamConfig(chunk_frames=1, window=2,
                                                                sampling=CFG.sampling))
    for k in range(4):
        g.generate(k, 1, TEXT)
    assert len(g.cache.chunks) == 2 and g.cache.nbytes() > 0


def test_chunks_must_come_in_order(gen):
    gen.generate(0, 5, TEXT)
    with pytest.raises(ValueError, match="chunk 2 requested but the cache holds chunks up to 0"):
        gen.generate(2, 5, TEXT)
    with pytest.raises(ValueError, match="not a multiple of chunk_frames=2"):
        gen.rebuild(torch.zeros(1, 16, 3, 16, 16), TEXT)


def test_causal_processor_without_context_is_diffusers_attention_bitwise():
    """Chunk 0 has no context: the causal processor must then do exactly what diffusers'
    own processor does (the non-causal generator keeps diffusers' processor)."""
    causal = ChunkGenerator(build_model("tiny", seed=0), CFG)
    plain = ChunkGenerator(build_model("tiny", seed=0), StreamConfig(chunk_frames=2,
                                                                    causal=False))
    assert torch.equal(causal.generate(0, 9, TEXT), plain.generate(0, 9, TEXT))
