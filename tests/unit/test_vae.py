"""Streaming VAE decode equals diffusers' full decode and its rules fail loudly, in this
process (the overlapped decode on ranks is tests/ranks/test_vae.py)."""

from __future__ import annotations

import inspect

import pytest
import torch
from diffusers import AutoencoderKLWan

from ppdit.analysis.vae_decode import measure_decode
from ppdit.checkpoint.source import ModelSource
from ppdit.parallel.decode_overlap.plan import OverlapPlan
from ppdit.runtime.observe.memory import track_peak_memory
from ppdit.vae.decode import denormalize
from ppdit.vae.presets import build_vae, get_vae_preset
from ppdit.vae.streaming import (
    StreamingDecoder,
    decode_full,
    decode_streaming,
    iter_chunks,
    output_frames,
)
from tests.conftest import CHUNKED_TOL


@pytest.fixture(scope="module")
def latents():
    return torch.randn(1, 16, 6, 8, 8, generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def full(vae, latents):
    return decode_full(vae, latents)


# -- frame arithmetic ---------------------------------------------------------------------------


def test_frame_arithmetic(vae, latents, full):
    assert [output_frames(f) for f in (1, 2, 5, 21)] == [1, 5, 17, 81]  # Wan: 21 -> 81 frames
    assert full.shape == (1, 3, output_frames(6), 32, 32)  # tiny VAE: 4x in space
    with StreamingDecoder(vae) as dec:
        counts = [dec.push(c).shape[2] for c in iter_chunks(latents, 2)]
        assert counts == [1, 8, 8, 4]  # 1, then 4 per latent frame: pushes of 1, 2, 2, 1
        assert sum(counts) == output_frames(6)


def test_presets_match_diffusers_and_the_tiny_dit():
    defaults = {k: v.default for k, v in inspect.signature(AutoencoderKLWan.__init__)
                .parameters.items() if k != "self"}
    wan = get_vae_preset("wan2.1").diffusers_config()
    for key in ("base_dim", "z_dim", "dim_mult", "num_res_blocks", "temperal_downsample"):
        assert wan[key] == defaults[key], key  # diffusers' defaults are Wan 2.1's VAE
    tiny = get_vae_preset("tiny")
    assert (tiny.z_dim, tiny.temporal_factor) == (16, 4)  # the DiT's 16 channels, Wan's 4x time
    with pytest.raises(ValueError, match="unknown VAE preset 'big'"):
        get_vae_preset("big")


def test_same_seed_same_weights():
    a, b, c = build_vae("tiny", seed=3), build_vae("tiny", seed=3), build_vae("tiny", seed=4)
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    assert any(not torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters(),
                                                          strict=True))


def test_checkpoint_must_be_local(tmp_path):
    with pytest.raises(ValueError, match="no weights are downloaded"):
        build_vae(checkpoint=tmp_path / "missing")


# -- equality with the full decode ----------------------------------------------------------------


def test_one_frame_per_push_equals_decode_full_bitwise(vae, latents, full):
    assert torch.equal(decode_streaming(vae, latents, chunk_frames=1), full)


@pytest.mark.parametrize("chunk_frames", [2, 3, 5])
def test_multi_frame_chunks_match_within_tolerance(vae, latents, full, chunk_frames):
    out = decode_streaming(vae, latents, chunk_frames=chunk_frames)
    assert out.shape == full.shape
    torch.testing.assert_close(out, full, **CHUNKED_TOL)
    assert torch.equal(out[:, :, :1], full[:, :, :1])  # frame 0 is always decoded alone


def test_streaming_keeps_state_between_pushes(vae, latents, full):
    """The cache is what makes pushes add up: decoding frame 3 without frames 0-2 before it
    gives different pixels (a decoder that cleared its cache per push would fail above)."""
    with StreamingDecoder(vae) as dec:
        for c in iter_chunks(latents[:, :, :3], 1):
            dec.push(c)
        assert sum(dec.cache_nbytes()) > 0
        with_history = dec.push(latents[:, :, 3:4])
    assert torch.equal(with_history, full[:, :, 9:13])
    with StreamingDecoder(vae) as fresh:
        fresh.push(latents[:, :, 2:3])
        without = fresh.push(latents[:, :, 3:4])
    assert not torch.allclose(without, with_history, **CHUNKED_TOL)


def test_reset_then_new_stream_equals_fresh_decoder(vae, latents):
    other = torch.randn(1, 16, 4, 8, 8, generator=torch.Generator().manual_seed(9))
    dec = StreamingDecoder(vae)
    for c in iter_chunks(latents[:, :, :4], 2):  # half a stream of something else
        dec.push(c)
    dec.reset()  # a hard cut
    assert sum(dec.cache_nbytes()) == 0
    after_reset = torch.cat([dec.push(c) for c in iter_chunks(other, 1)], dim=2)
    assert torch.equal(after_reset, decode_streaming(vae, other, 1))
    assert torch.equal(after_reset, decode_full(vae, other))


def test_streams_and_decode_full_share_a_vae_without_interfering(vae, latents, full):
    dec = StreamingDecoder(vae)
    first = dec.push(latents[:, :, :1])
    decode_full(vae, latents[:, :, :3])  # clears diffusers' own cache, not the stream's
    rest = dec.push(latents[:, :, 1:])
    assert torch.equal(torch.cat([first, rest], dim=2), decode_streaming(vae, latents, 5))
    torch.testing.assert_close(torch.cat([first, rest], dim=2), full, **CHUNKED_TOL)


def test_denormalize_commutes_with_chunks_and_is_wan_pipelines(vae, latents):
    """One ``denormalize`` for every decode: elementwise, so a chunk or a row band denormalizes
    as the whole video does; ``WanPipeline``'s arithmetic (``/ (1 / std)``), not ``* std``."""
    whole = denormalize(latents, vae.config)
    parts = torch.cat([denormalize(c, vae.config) for c in iter_chunks(latents, 2)], dim=2)
    assert torch.equal(parts, whole)
    std = torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
    assert torch.equal(whole, latents / (1.0 / std) + mean)
    streamed = decode_streaming(vae, whole, 1)
    assert torch.equal(streamed, decode_full(vae, whole))


# -- errors ---------------------------------------------------------------------------------------


def test_first_chunk_must_be_one_frame(vae, latents):
    dec = StreamingDecoder(vae)
    with pytest.raises(ValueError, match=r"first chunk .* exactly 1 latent frame, got F=3"):
        dec.push(latents[:, :, :3])
    dec.push(latents[:, :, :1])
    dec.push(latents[:, :, 1:4])  # after the first frame any length is fine
    dec.reset()
    with pytest.raises(ValueError, match="exactly 1 latent frame, got F=2"):
        dec.push(latents[:, :, :2])  # reset starts a new stream: the rule applies again


def test_bad_chunks_are_named(vae, latents):
    dec = StreamingDecoder(vae)
    with pytest.raises(ValueError, match="C=8 channels but this VAE has z_dim=16"):
        dec.push(torch.zeros(1, 8, 1, 8, 8))
    with pytest.raises(ValueError, match="got 4 dims"):
        dec.push(torch.zeros(1, 16, 8, 8))
    with pytest.raises(ValueError, match="F >= 1"):
        dec.push(latents[:, :, :0])
    dec.push(latents[:, :, :1])
    with pytest.raises(ValueError, match=r"\(B, H, W\)=\(1, 4, 4\) differs .* reset\(\)"):
        dec.push(torch.zeros(1, 16, 1, 4, 4))


def test_push_after_close_is_an_error(vae, latents):
    dec = StreamingDecoder(vae)
    dec.push(latents[:, :, :1])
    dec.close()
    assert dec.closed and dec.cache_nbytes() == []
    with pytest.raises(RuntimeError, match=r"push\(\) after close\(\)"):
        dec.push(latents[:, :, 1:2])
    with pytest.raises(RuntimeError, match=r"reset\(\) after close\(\)"):
        dec.reset()


def test_iter_chunks_and_tiling_rules(vae, latents):
    assert [c.shape[2] for c in iter_chunks(latents, 4)] == [1, 4, 1]
    with pytest.raises(ValueError, match="chunk_frames=0"):
        list(iter_chunks(latents, 0))
    vae.enable_tiling()
    try:
        with pytest.raises(ValueError, match="disable_tiling"):
            StreamingDecoder(vae)
    finally:
        vae.disable_tiling()


# -- measurements ---------------------------------------------------------------------------------


def test_peak_memory_counts_live_tensors():
    before, out = torch.ones(1024, 1024), torch.empty(1024, 1024)  # 4 MiB each, not counted
    with track_peak_memory() as mem:
        before[:512].mul(1.0)  # a view of a tensor made before the block, then 2 MiB (freed)
        torch.add(before, 1.0, out=out)  # writes into a tensor made before: nothing new
        a = torch.ones(1024, 1024)  # 4 MiB
        b = a + 1  # 4 MiB more while a is alive
        del a, b
        c = torch.ones(512, 1024)  # 2 MiB: below the peak
        del c
    assert mem.peak_bytes == 8 * 2**20 and mem.how == "cpu live tensor bytes"


def test_measure_decode_streaming_holds_less_than_full(vae):
    z = torch.randn(1, 16, 9, 8, 8, generator=torch.Generator().manual_seed(2))
    rows = {r.mode: r for r in measure_decode(vae, z, (1, 4), repeats=1)}
    assert list(rows) == ["full", "stream 1", "stream 4"]
    assert rows["full"].ttff_s == rows["full"].total_s
    assert all(0 < r.ttff_s <= r.total_s for r in rows.values())
    # Live-tensor bytes are deterministic: full decode holds its whole output (and the copies
    # torch.cat makes), one-frame streaming never more than one push's frames and the cache.
    assert rows["stream 1"].peak_bytes < rows["full"].peak_bytes


# -- decode overlapped with generation: the plan's rules ------------------------------------------


def test_overlap_plan_rules():
    with pytest.raises(ValueError, match="max_ahead=-1"):
        OverlapPlan(max_ahead=-1)
    with pytest.raises(ValueError, match="z_dim"):
        OverlapPlan(source=ModelSource("dummy"))  # 8-channel latents cannot feed a 16-channel VAE
    plan = OverlapPlan(num_chunks=5, max_ahead=1, chunk_frames=3, push_frames=2)
    assert plan.num_credits() == 3
    pieces = plan.pushes(torch.zeros(plan.chunk_shape), 0)
    assert [p.shape[2] for p in pieces] == [1, 2]
    assert [p.shape[2] for p in plan.pushes(torch.zeros(plan.chunk_shape), 1)] == [2, 1]
