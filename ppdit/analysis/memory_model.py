"""How many bytes one GPU of a layout holds, term by term, from the model's shapes alone.

``rank_memory_model(preset, layout)`` answers "does this layout fit?" before anything runs,
checked against the live-tensor peaks ``memory_measure`` records on CPU ranks (within 15% on the
small preset, ``tests/ranks/test_memory_model.py``). Each term counts the tensors alive at the
same moment, times their shape:

* **weights** — ``hardware.predict``'s weights per GPU (the linear and conv weights of the blocks
  and stages the rank owns, 1/tp of the split layers; biases and norm scales, < 1%, left out).
  FSDP: the root and 1/P of the blocks.
* **gathered** (FSDP only) — the running block, whole, and the next one's all-gather in flight
  (its output, a whole block, and its input, 1/P of one). CPU ranks (gloo) measure about 3
  blocks, 12% above this, not yet explained: the term is the GPU's count, not fitted to the CPU.
* **activations** — one forward's high point, in u = m x D x (dtype bytes), m = b x s the rows
  the rank computes (b samples, s = S / sp tokens). Two u are held through every block (its
  input, and the patch embedding's output held by the caller; under SP the whole (b, S, D)
  embedding plus this rank's slice, sp + 1 u). On top, a block's high points (f = ffn / D,
  t = tp, r = 4 / dtype bytes: Wan upcasts norms, rope and the residual adds to fp32):

  - rope of q: the norm's output, q, k, v, rope's output and its fp32 halves: 1 + (4 + 1.5 r) / t
  - attention's output projection: norm, q, k, v, output, projection (+ partial sum and
    all-reduced copy under TP): 1 + 4 / t + (1 or 3)
  - Ulysses attention: the head-split copies of q, k, v and of the output as well: 1 + 7 / t + 1
  - FFN at its GELU: the residual, cross-attention's output, the norm, and the FFN's hidden
    input and output: 3 + 2 f / t; at its down projection: 3 + f / t + (1 or 3)
  - the fp32 residual add (bf16 only): 4 + r (2 + 1)

  plus the conditioning (fp32 rope tables of all S tokens, projected text, timestep
  projections). Attention is one fused kernel: no S x S scores (flash kernels keep their tiles
  in workspace no operator returns: not counted, nor measured). Ring attention's own high
  point, its fp32 merge, is ``ring_attention_peak_bytes``.
* **latents** — the fp32 state in and out, and a batched step's concatenated input.
* **handoff** — step split: ``RECEIVE_FRAMES`` frames of (1 + solver slots) fp32 latents on a
  later stage; layer split: the last stage 3 frames of h (2 receives posted + 1 copy), the
  others one frame per micro-batch in flight; CFG-parallel: the two halves' velocities.
* **solver** — Euler keeps nothing; UniPC 3 fp32 latents per request (2 model outputs and the
  last sample: with the latent, the 4 latents lesson 16 hands over).
* **text_embeddings** — each request's prompt and negative prompt (L x text_dim), and their
  concatenation when the halves run as one batch.
* **vae_peak** — decoding the video on one rank (fp32, as Wan runs its VAE; ``vae_peak_bytes``).
* **text_encoder** — umT5-XXL's weights, only if kept on the GPU (``ppdit.checkpoint.text``
  encodes once and drops it: by default 0).

``total = weights + text_encoder + max(run_peak, vae_peak)``: the decode runs after the last
step, when the forward's activations are gone but the DiT's weights are still there."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from ppdit.analysis.hardware import ONE_GPU, predict
from ppdit.analysis.roofline import (
    DTYPE_BYTES,
    block_ops,
    dtype_name,
    latent_for,
    layer_handoff_bytes,
    step_handoff_bytes,
    totals,
)
from ppdit.analysis.roofline_vae import VAE_CONFIGS, WAN21_VAE, vae_decoder_ops
from ppdit.parallel.layout import Layout
from ppdit.presets import ModelPreset, get_preset

SOLVER_SLOTS = {"euler": 0, "unipc": 3}  # fp32 latents of memory per request
RECEIVE_FRAMES = 3  # a FrameReceiver's ring: depth 2 + 1 receive posted ahead
UMT5_XXL_PARAMS = 5.68e9  # encoder only: 256k x 4096 embedding + 24 layers of 4096 / 10240


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes one GPU (the busiest rank) of a layout holds, by what holds them."""
    layout: str
    weights: float
    gathered: float
    activations: float
    latents: float
    handoff: float
    solver: float
    text_embeddings: float
    vae_peak: float
    text_encoder: float

    @property
    def run_peak(self) -> float:
        """Allocated while denoising, above the weights (what ``memory_measure`` measures)."""
        return (self.gathered + self.activations + self.latents + self.handoff + self.solver
                + self.text_embeddings)

    @property
    def total(self) -> float:
        """The rank's high-water mark: weights, then the larger of denoising and decoding."""
        return self.weights + self.text_encoder + max(self.run_peak, self.vae_peak)

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "layout"} | {"total": self.total}


def block_peak_units(preset: ModelPreset, layout: Layout, dtype: str) -> float:
    """The highest of a block's high points, in u = m x D x dtype bytes (module docstring)."""
    t, f, r = layout.tp, preset.ffn_dim / preset.dim, 4 / DTYPE_BYTES[dtype]
    row = 1 if t == 1 else 3  # a row-parallel output: partial sum, all-reduced, + bias
    phases = [1 + (4 + 1.5 * r) / t, 1 + 4 / t + row, 3 + 2 * f / t, 3 + f / t + row]
    if layout.ulysses > 1:
        phases.append(1 + 7 / t + 1)
    if r > 1:
        phases.append(4 + r * 3)
    return max(phases)


def activation_bytes(preset: ModelPreset, layout: Layout, shape: tuple[int, ...], dtype: str,
                     b: int) -> float:
    """One forward's high point: the held stream, the block's peak, the conditioning."""
    nb, s_all = DTYPE_BYTES[dtype], preset.num_tokens(shape)
    m = b * math.ceil(s_all / layout.sp)
    units = 2 + (layout.sp if layout.sp > 1 else 0) + block_peak_units(preset, layout, dtype)
    conditioning = (2 * s_all * preset.head_dim * 4 + b * preset.text_len * preset.dim * nb
                    + b * 13 * preset.dim * 4)  # rope cos + sin; text; temb, 6 + 6 modulations
    return units * m * preset.dim * nb + conditioning


def handoff_bytes(preset: ModelPreset, layout: Layout, shape: tuple[int, ...], dtype: str,
                  solver: str, requests: int, micro_batches: int) -> float:
    """Receive and send buffers of the busiest rank (module docstring)."""
    frames = 0.0
    if layout.step > 1:
        frames = RECEIVE_FRAMES * (1 + SOLVER_SLOTS[solver]) * step_handoff_bytes(shape)
    elif layout.splits_blocks:
        h = layer_handoff_bytes(preset, shape, batch=1, dtype=dtype)  # it stands alone: no TP
        frames = max(RECEIVE_FRAMES + (micro_batches if layout.stages > 2 else 0),
                     micro_batches) * h
    halves = 2 * math.prod(shape) * DTYPE_BYTES[dtype] * requests if layout.cfg > 1 else 0.0
    return frames + halves


def stale_kv_bytes(preset: ModelPreset, layout: Layout, shape: tuple[int, ...], dtype: str,
                   b: int) -> float:
    """PipeFusion: every block a stage holds keeps K and V of the whole sequence across steps
    (``parallel.pipefusion``): 2 x blocks x b x S x D."""
    if layout.pipefusion == 1:
        return 0.0
    blocks = math.ceil(preset.num_layers / layout.pipefusion)
    return 2 * blocks * b * preset.num_tokens(shape) * preset.dim * DTYPE_BYTES[dtype]


def vae_peak_bytes(latent_shape: tuple[int, ...], config: dict | None = None) -> float:
    """Peak of decoding one latent video with Wan 2.1's VAE in fp32, a latent frame at a time:
    every causal conv's cache of 2 frames, plus the larger of the last frame's widest conv (input
    padded with the cached frames, output, residual) beside the video so far, and the final
    concatenation (2 x the output). Wan 2.2's VAE (residual blocks) has wider activations
    beside a smaller video, so its widest conv is counted in full: the block's input copy (kept
    for the shortcut), the input and its norm, the cached frames' concatenation and its padding,
    the output and the shortcut's, the cache's new two frames. Checked against the tiny VAEs
    (``test_memory_model.py``)."""
    ops = [op for op in vae_decoder_ops(latent_shape, dtype="fp32", config=config)
           if op.kind == "conv"]
    b, _, frames = latent_shape[:3]
    out_t, out_h, out_w, out_c = ops[-1].dims[2:6]  # Wan 2.2: 12 channels = 3 x 2 x 2 pixels
    video = b * out_c * out_t * out_h * out_w * 4
    residual = {**WAN21_VAE, **(config or {})}["is_residual"]
    caches, widest, kept, block = 0, 0, 0, None

    def frame_bytes(channels: int, t: int, h: int, w: int) -> int:  # one latent frame's share
        return b * channels * max(1, round(t / frames)) * h * w * 4

    for op in ops:
        _, cin, t, h, w, cout, kt = op.dims[:7]
        chunk = max(1, round(t / frames))  # frames of one latent frame at this level
        if kt == 3:
            caches += 2 * b * cin * h * w * 4
        if not residual:
            widest = max(widest, b * h * w * 4 * (cin * (chunk + 2) + cout * chunk + cin * chunk))
            continue
        if op.name.startswith("up_blocks.") and op.name[:11] != block:
            block, kept = op.name[:11], frame_bytes(cin, t, h, w)  # the shortcut's input copy
        widest = max(widest, kept * (op.name != "conv_out") + b * h * w * 4 * 2 * (
            cin * (chunk + 2) + cin * chunk + cout * chunk + cin))
    return caches + max(2 * video, video + widest)


def ring_attention_peak_bytes(preset: str | ModelPreset, ring: int, resolution: str = "480p",
                              *, frames: int = 81, dtype: str = "bf16", batch: int = 1,
                              scores: bool = False) -> float:
    """Bytes alive at the high point of one ``ring_attention`` call on a rank of a ring of
    ``ring``. With s = ceil(S / ring) tokens per rank, e = b s D elements in one of q, k, v,
    n = dtype bytes and lse = b H s log-sum-exps:

    * q, k, v (3 e n), the K/V block in hand (2 e n), and the next one arriving (2 e n) while a
      hop is in flight: every step but the last, so at the merge only if P > 2;
    * the merge (steps 1..P-1) is the high point: running output, the block's, both rescaled and
      their sum, five fp32 (b, s, H, hd) tensors (20 e), and five fp32 (b, H, s) ones (20 lse).
      Step 0's kernel output and its fp32 copy, e (n + 4), are less for every dtype;
    * the fused kernel keeps its tiles on chip / in workspace: O(S) in all.

    ``scores=True``: the path it replaced, fp32 scores formed whole (at softmax's exp: scores,
    scores - lse and their exp, 3 fp32 (b, H, s, s)), beside the held blocks."""
    if ring < 2:
        raise ValueError(f"ring={ring}: a ring needs 2 ranks or more")
    p, n = get_preset(preset), DTYPE_BYTES[dtype_name(dtype)]
    s = math.ceil(p.num_tokens(latent_for(resolution, frames)) / ring)
    e, lse = batch * s * p.dim, batch * p.num_heads * s
    if scores:  # every step forms them, step 0 beside the incoming block
        return (3 + 2 + 2) * e * n + 3 * lse * s * 4
    return (3 + 2 + (2 if ring > 2 else 0)) * e * n + 5 * (4 * e) + 5 * (4 * lse)


def rank_memory_model(preset: str | ModelPreset, layout: Layout = ONE_GPU, *,
                      latent_shape: tuple[int, ...] | None = None, dtype: str = "bf16",
                      cfg: bool = True, cfg_mode: str = "batched", solver: str = "euler",
                      requests_in_flight: int = 1, micro_batches: int | None = None,
                      text_encoder: bool = False) -> MemoryBreakdown:
    """Per-GPU bytes of ``layout`` for ``preset`` (the busiest rank), term by term as above.
    ``cfg``: guidance's two halves run as one batch (``cfg_mode="batched"``) or two forwards
    (``"split"``); CFG-parallel runs one per rank. ``micro_batches`` (layer split): default one
    per sample. ``requests_in_flight``: requests a rank holds at once (a filled step split
    batches none: their latents and solver memory add up)."""
    p, dtype = get_preset(preset), dtype_name(dtype)
    if solver not in SOLVER_SLOTS:
        raise ValueError(f"solver={solver!r} is not one of {tuple(SOLVER_SLOTS)}")
    shape = tuple(latent_shape or p.latent_shape)
    latent = step_handoff_bytes(shape)  # one request's fp32 latent
    halves, r = 2 if cfg else 1, requests_in_flight
    # samples in one forward: both halves batched, or one (split, CFG-parallel, or layer
    # split's micro-batches of one sample)
    batched = 2 if cfg and cfg_mode == "batched" and layout.cfg == 1 else 1
    b = 1 if layout.layer > 1 else batched * r  # PipeFusion: every half in each patch
    mb = micro_batches or halves * r
    pred = predict(p, "H100 SXM", layout, latent_shape=shape, dtype=dtype, cfg=cfg)
    weights, gathered = pred.weights_gb * 1e9, 0.0
    if layout.fsdp:  # predict counts 2 gathered blocks as held; here they are the run's
        block = totals(block_ops(p, shape, dtype=dtype)).weights * DTYPE_BYTES[dtype]
        weights -= 2 * block
        gathered = (2 + 1 / layout.shards) * block
    text_rows = halves * r * p.text_len * p.text_dim * DTYPE_BYTES[dtype]
    return MemoryBreakdown(
        layout=layout.name, weights=weights, gathered=gathered,
        activations=activation_bytes(p, layout, shape, dtype, b),
        latents=(2 * r + (b if b > 1 else 0)) * latent,
        handoff=handoff_bytes(p, layout, shape, dtype, solver, r, mb) + stale_kv_bytes(
            p, layout, shape, dtype, b),
        solver=SOLVER_SLOTS[solver] * r * latent,
        text_embeddings=text_rows * (2 if b > 1 else 1),
        vae_peak=vae_peak_bytes((1, *shape[1:]), VAE_CONFIGS.get(p.vae)),
        text_encoder=UMT5_XXL_PARAMS * DTYPE_BYTES[dtype] if text_encoder else 0.0)
