"""What no run has measured yet, probed before the figures on record (issue 38): a posted NCCL
receive under a stream vs a device-wide sync (``Placement.synchronize`` and its CPU model,
``nccl_rules.device_sync``, assume the first returns at once and the second waits for the
sender), ring attention's peak at Wan 1.3B / 14B shapes against the memory model, and
``generate`` from a full-size random Wan 1.3B folder on 3 layouts against one device.

Each also runs on the CPU at tiny sizes: the CPU tests run this code."""

from __future__ import annotations

import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ppdit.analysis.gpu_run_schema import REAL_GENERATE
from ppdit.analysis.memory_model import ring_attention_peak_bytes
from ppdit.analysis.roofline import latent_for
from ppdit.checkpoint.tiny import TINY_VOCAB, save_pipeline, tiny_text_encoder, word_tokenizer
from ppdit.gpu_check.forwards import build_direct
from ppdit.gpu_check.sections import first_line, rank_peak_gb, release, sig
from ppdit.model import torch_dtype
from ppdit.parallel.layout import parse_layout
from ppdit.parallel.sequence.ring import Ring, ring_attention
from ppdit.presets import get_preset
from ppdit.runtime.comm.wire import wait_for
from ppdit.runtime.device import Placement, process_placement
from ppdit.runtime.observe.memory import track_peak_memory
from ppdit.runtime.observe.timing import timed
from ppdit.runtime.processes.hello import hello
from ppdit.runtime.processes.launch import launch
from ppdit.runtime.processes.pool import ranks
from ppdit.t2v.generate import generate
from ppdit.t2v.spec import GenerateSpec
from ppdit.vae.presets import build_vae

DELAY_S = 2.0  # rank 0 sends this long after the barrier: what a device-wide sync must wait
WAIT_S = 120  # any wait of the probe: far above DELAY_S, low enough to end a hang in budget
# A layout's latent vs one device's, |diff| / |ref| (2-norms): bf16 and reordered sums make a
# correct run differ a little (ring, tiny model, 2 steps, CPU: 1.1e-2, beyond tests/support's
# elementwise BF16_TOL), a wrong one a lot (one of two K/V blocks lost: 0.98 at the attention).
REL_TOL = 5e-2


def sync_probe(device: str = "cuda", delay_s: float = DELAY_S) -> dict:
    """Rank 1's two waits (s) on a receive posted ``delay_s`` before its send, and whether
    they are what ppdit assumes. ``device="cpu"``: gloo ranks keeping NCCL's rules (the model)."""
    if device == "cuda" and torch.cuda.device_count() < 2:
        return {"status": "skipped", "reason": f"needs 2 GPUs (NCCL); {torch.cuda.device_count()}"
                " here, and ranks sharing a GPU talk over gloo, which posts nothing on a stream"}
    rows = launch(_probe, 2, args=(delay_s,), device=device, nccl_rules=device == "cpu" or None,
                  timeout_s=WAIT_S, echo=False)
    (stream_s, device_s), model = rows[1]["waits"], "CPU ranks keeping NCCL's rules: the model"
    return {"world_size": 2, "devices": [r["device"] for r in rows], "delay_s": delay_s,
            "backend": rows[0]["backend"], "stream_sync_s": sig(stream_s, 3),
            "device_sync_s": sig(device_s, 3), "notes": None if device == "cuda" else model,
            "as_modelled": stream_s < delay_s / 4 and device_s > delay_s / 2}


def _probe(ctx, delay_s: float) -> dict:
    """The pair's first messages build its communicator; a barrier starts both clocks."""
    wire, x = ctx.wire, torch.zeros(256, device=ctx.wire.buffers)
    first = wire.send(x, 1) if ctx.rank == 0 else wire.recv(x, 0)
    wait_for(first, WAIT_S, "sync probe: the warm-up message")
    dist.barrier()
    row = {"device": str(ctx.device), "backend": ctx.placement.backend, "waits": None}
    if ctx.rank == 0:
        time.sleep(delay_s)
        wait_for(wire.send(x, 1), WAIT_S, "sync probe: the late send")
        return row
    posted = wire.recv(x, 0)
    with timed() as stream:  # the host's clock: how long each call blocks it
        ctx.placement.synchronize()  # the current stream's work only
    with timed() as device:
        ctx.placement.synchronize(device_wide=True)
    row["waits"] = (stream.seconds, device.seconds)
    wait_for(posted, WAIT_S, "sync probe: the late receive")
    return row


class ServedWire:
    """A ring's hops served from memory: hop i brings rank - i's K/V block into the buffer
    ``ring_attention`` allocates, done at once (no work to wait for): one rank's exact
    arithmetic and buffers, without a second rank."""

    def __init__(self, kv: torch.Tensor, split: tuple[int, ...], rank: int):
        self.blocks, self.rank, self.hops = kv.split(split, dim=2), rank, 0  # kv (2, B, S, H, hd)
        self.buffers = kv.device

    def batch(self, ops, group=None) -> list:
        self.hops += 1
        ops[1][1].copy_(self.blocks[(self.rank - self.hops) % len(self.blocks)])
        return []


def ring_memory(placement: Placement, models: tuple[str, ...] = ("wan2.1-1.3b", "wan2.1-14b"),
                *, ring: int = 2, frames: int = 81, dtype: str = "bf16") -> dict:
    """Per model at 480p: every rank's ring attention; the highest peak (GB) against the
    model's, and the largest |difference| of the gathered output from plain attention."""
    return {"ring": ring, "rows": [_ring_row(m, placement, ring, frames, dtype) for m in models]}


@torch.no_grad()
def _ring_row(model: str, placement: Placement, ring: int, frames: int, dtype: str) -> dict:
    p, dev = get_preset(model), placement.device
    s = p.num_tokens(latent_for("480p", frames))
    g = torch.Generator(device=dev).manual_seed(0)
    q, k, v = (torch.randn(1, s, p.num_heads, p.head_dim, generator=g, device=dev,
                           dtype=torch_dtype(dtype)) for _ in range(3))  # (B, S, H, hd)
    split = tuple(c.shape[1] for c in q.chunk(ring, dim=1))
    kv, outs, peak = torch.stack((k, v)), [], 0
    for r in range(ring):
        lo = sum(split[:r])
        with track_peak_memory(placement) as mem:  # the rank's own q, k, v count, as modelled
            mine = [x[:, lo:lo + split[r]].clone() for x in (q, k, v)]
            outs.append(ring_attention(*mine, Ring(None, split, r, ServedWire(kv, split, r))))
            del mine
        peak = max(peak, mem.peak_bytes)
    plain = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)))
    predicted = ring_attention_peak_bytes(p, ring, frames=frames, dtype=dtype)
    return {"model": model, "dtype": dtype, "tokens": s, "heads": p.num_heads,
            "head_dim": p.head_dim, "peak_gb": sig(peak / 1e9), "model_gb": sig(predicted / 1e9),
            "ratio": sig(peak / predicted, 3), "max_abs_diff": sig(
                (torch.cat(outs, dim=1) - plain.transpose(1, 2).float()).abs().max().item())}


def build_random_folder(out: Path, preset: str, vae_preset: str, device: torch.device) -> Path:
    """A pipeline folder: ``preset``'s transformer drawn on ``device`` in bf16 (seconds for 1.3B
    on a GPU), a random ``vae_preset`` VAE, a tiny text encoder (umT5-XXL's 11 GB would cost
    only time: the prompts' embeddings are not what is measured)."""
    tokenizer = word_tokenizer(TINY_VOCAB)
    encoder = tiny_text_encoder(get_preset(preset).text_dim, len(tokenizer)).to(torch.bfloat16)
    return save_pipeline(out, tokenizer=tokenizer, text_encoder=encoder,
                         transformer=build_direct(preset, device).cpu(),
                         vae=build_vae(vae_preset, seed=0))


def real_generate(device: str = "cuda", *, preset: str = "wan2.1-1.3b", vae: str = "wan2.1",
                  video: tuple[int, int, int] = (81, 480, 832), steps: int = 2,
                  layouts: tuple[str, ...] = ("step", "layer", "ring")) -> dict:
    """One device, then each of ``layouts`` on 2 ranks: seconds, peak GB per rank, the final
    latent against one device's. ``video``: (frames, height, width)."""
    here = process_placement(device)
    with tempfile.TemporaryDirectory(prefix="ppdit-real-") as tmp:
        with timed() as build:  # timed() on the host's clock: results come back on the CPU
            folder = build_random_folder(Path(tmp), preset, vae, here.device)
        frames, height, width = video
        spec = GenerateSpec(str(folder), "a red fox jumps over the river", "blurry", dtype="bf16",
                            num_steps=steps, num_frames=frames, height=height, width=width,
                            text_encoder="cpu")
        with timed() as clock, track_peak_memory(here) as mem:
            ref = generate(spec, decode_video=False, device=device).latent
        release()  # the reference's cached GPU memory, before the ranks load theirs
        rows = [{**dict.fromkeys(REAL_GENERATE["rows"][0]), "layout": "one device",
                 "status": "ok", "seconds": sig(clock.seconds, 3),
                 "peak_gb": [sig(mem.peak_bytes / 1e9, 3)]}]
        with ranks(2, device=device, timeout_s=600, echo=False) as pool:
            where = pool.run(hello)
            pool.run(rank_peak_gb)  # from here, each layout's own peak
            rows += [_layout_row(spec, name, ref, pool, device) for name in layouts]
    bad = [f"{r['layout']}: {r['reason']}" for r in rows if r["status"] != "ok"]
    return {"model": preset, "latent_shape": list(ref.shape), "steps": steps, "rows": rows,
            "devices": [w["device"] for w in where], "backend": where[0]["backend"],
            "folder_s": sig(build.seconds, 3), "reason": "; ".join(bad) or None,
            "status": "ok" if not bad else "partial" if len(bad) < len(layouts) else "error"}


def _layout_row(spec, name: str, ref: torch.Tensor, pool, device: str) -> dict:
    """One layout's run, or why it failed; a latent beyond ``REL_TOL`` is a failure too."""
    layout = parse_layout(name, 2)
    row = {**dict.fromkeys(REAL_GENERATE["rows"][0]), "layout": layout.name, "status": "ok"}
    try:
        with timed() as clock:
            got = generate(replace(spec, layout=layout), decode_video=False, pool=pool,
                           device=device).latent.float()
    except Exception as err:  # recorded; the pool restarts its ranks for the next layout
        traceback.print_exc()
        return {**row, "status": "error", "reason": f"{type(err).__name__}: {first_line(err)}"}
    peaks, rel = pool.run(rank_peak_gb), ((got - ref).norm() / ref.norm()).item()
    row.update(seconds=sig(clock.seconds, 3), bitwise_equal=torch.equal(got, ref),
               rel_diff=sig(rel), max_abs_diff=sig((got - ref).abs().max().item()),
               within_tol=rel <= REL_TOL, peak_gb=None if None in peaks else peaks)
    if not row["within_tol"]:
        row.update(status="error", reason=f"latent differs from one device's by {rel:.3g} "
                   f"(|diff| / |ref|) > REL_TOL {REL_TOL}")
    return row
