"""FLOPs and minimum bytes of every operation of the Wan 2.1 DiT and its VAE decoder.

Every speed question is settled by two equations (Williams et al. 2009; He, "Making Deep
Learning Go Brrrr"):

    time >= FLOPs / (FLOP/s)            time >= bytes / (bytes/s)

so this module counts, per operation, the FLOPs (2 per multiply-add, the convention of
``torch.utils.flop_counter`` and of every MFU estimate) and the *minimum* bytes it must move
to and from memory: each input read once, each output written once, weights included. Their
ratio, the arithmetic intensity (FLOP/byte), places the operation on a roofline;
``ppdit.analysis.hardware`` supplies the ceilings and turns the counts into times.

Conventions, each an approximation stated so a reader can check or change it:

* Bytes are counted at the model dtype (bf16: 2 bytes) even where Wan computes a norm in fp32:
  a fused kernel reads bf16 and writes bf16.
* Small tensors without a token dimension (biases, norm weights, the per-sample shift / scale /
  gate vectors, rope tables) are not counted: they are < 1/S of the token traffic. Linear and
  conv weights are counted.
* Layout copies (the transpose after the patch embedding, unpatchify) are not counted: an
  implementation can write in the layout it needs.
* Elementwise FLOPs (norms, softmax, GELU, rope) are rough per-element counts. They never decide
  a bound: such ops move >= 2 bytes per element, far left of any ridge point.
* Attention ``"flash"`` is one fused kernel that reads Q, K, V and writes O (what
  ``F.scaled_dot_product_attention`` runs on a GPU); ``"naive"`` writes the scores to memory
  (QK^T, softmax, PV as three ops). Same FLOPs, very different bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ppdit.presets import ModelPreset, get_preset

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
# torch dtypes by their names (str(torch.bfloat16) == "torch.bfloat16"): no torch import here
_TORCH_DTYPES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}

# FLOPs per element of elementwise work (rough; see the module docstring).
LAYERNORM_FLOPS = 5  # mean, variance (2), subtract, multiply by 1/std
MODULATE_FLOPS = 2  # x * (1 + scale) + shift, or the affine weight and bias
RMSNORM_FLOPS = 4  # square, mean, multiply by 1/rms, multiply by the weight
ROPE_FLOPS = 3  # x1 * cos - x2 * sin, per output element
GELU_FLOPS = 8  # tanh approximation
SOFTMAX_FLOPS = 5  # max, subtract, exp, sum, divide

# How each op kind is drawn and grouped on a roofline.
GROUPS = {"linear": "matmul", "sdpa": "attention", "qk": "attention", "pv": "attention",
          "patchify": "conv", "conv": "conv"}


RESOLUTIONS = {"480p": (480, 832), "720p": (720, 1280)}  # (height, width) in pixels


LATENT_OF_VAE = {"wan2.1": (16, 8), "wan2.2": (48, 16)}  # (channels, spatial factor)


def latent_for(resolution: str = "480p", frames: int = 81, batch: int = 1,
               vae: str = "wan2.1") -> tuple[int, ...]:
    """Wan's latent for a video: the VAE compresses 4x in time (plus the first frame), 8x in
    space into 16 channels (Wan 2.2's: 16x into 48, and the size rounds down to whole 2x2
    patches: TI2V's 720p is 704 x 1280). 480p x 81 frames -> (1, 16, 21, 60, 104)."""
    if (frames - 1) % 4:
        raise ValueError(f"frames={frames} must be 4k + 1 (the VAE keeps the first frame and "
                         "compresses the rest 4x in time)")
    (h, w), (channels, s) = RESOLUTIONS[resolution], LATENT_OF_VAE[vae]
    return (batch, channels, 1 + (frames - 1) // 4, h // (2 * s) * 2, w // (2 * s) * 2)


def dtype_name(dtype) -> str:
    """``"bf16"`` for ``torch.bfloat16`` or ``"bf16"``; the error lists the known names."""
    name = dtype if isinstance(dtype, str) else _TORCH_DTYPES.get(str(dtype), dtype)
    if name not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}: choose one of {sorted(DTYPE_BYTES)}")
    return name


@dataclass(frozen=True)
class Op:
    """One operation: its FLOPs and minimum bytes per call, and how often a forward calls it."""
    name: str
    kind: str  # how it runs: linear, sdpa, qk, softmax, pv, layernorm, rmsnorm, rope, gelu, ...
    flops: int  # per call
    bytes: int  # minimum bytes moved per call
    dims: tuple[int, ...]  # the shape parameters; enough to rebuild the call and time it
    weights: int = 0  # parameter elements it reads (linear and conv weights)
    count: int = 1  # calls per forward (a block op: once per block)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP/byte: where the op sits on the roofline's x-axis."""
        return self.flops / self.bytes

    @property
    def group(self) -> str:
        """matmul, attention, conv or elementwise."""
        return GROUPS.get(self.kind, "elementwise")

    def repeated(self, n: int) -> Op:
        """The same op called ``n`` times as often (layers, CFG's two forwards)."""
        return replace(self, count=self.count * n)


def linear(name: str, m: int, k: int, n: int, nbytes: int) -> Op:
    """``y = x W^T`` with x (m, k), W (n, k): 2mkn FLOPs; reads x and W, writes y (m, n)."""
    return Op(name, "linear", 2 * m * k * n, (m * k + k * n + m * n) * nbytes, (m, k, n), k * n)


def elementwise(name: str, kind: str, rows: int, cols: int, flops_per_element: int,
                nbytes: int, reads: int = 1) -> Op:
    """Reads ``reads`` tensors of (rows, cols) and writes one."""
    n = rows * cols
    return Op(name, kind, flops_per_element * n, (reads + 1) * n * nbytes, (rows, cols))


def attention_ops(prefix: str, batch: int, heads: int, s_q: int, s_kv: int, head_dim: int,
                  nbytes: int, mode: str = "flash") -> list[Op]:
    """softmax(Q K^T / sqrt(d)) V for Q (B, H, s_q, d) and K, V (B, H, s_kv, d): 2 matmuls of
    2 * B*H*s_q*s_kv*d FLOPs each, plus the softmax. ``"naive"`` also writes the (B, H, s_q,
    s_kv) scores, reads them for the softmax, writes the probabilities and reads them for PV."""
    dims = (batch, heads, s_q, s_kv, head_dim)
    q_or_o, k_or_v = batch * heads * s_q * head_dim, batch * heads * s_kv * head_dim
    scores = batch * heads * s_q * s_kv
    matmul = 2 * scores * head_dim
    if mode == "flash":
        return [Op(f"{prefix}.sdpa", "sdpa", 2 * matmul + SOFTMAX_FLOPS * scores,
                   (2 * q_or_o + 2 * k_or_v) * nbytes, dims)]
    if mode != "naive":
        raise ValueError(f"attention={mode!r} must be 'flash' or 'naive'")
    return [Op(f"{prefix}.qk", "qk", matmul, (q_or_o + k_or_v + scores) * nbytes, dims),
            Op(f"{prefix}.softmax", "softmax", SOFTMAX_FLOPS * scores, 2 * scores * nbytes, dims),
            Op(f"{prefix}.pv", "pv", matmul, (scores + k_or_v + q_or_o) * nbytes, dims)]


def _wan(preset: str | ModelPreset) -> ModelPreset:
    p = get_preset(preset)
    if p.kind != "wan":
        raise ValueError(f"preset {p.name!r} is not a Wan transformer: nothing to account for")
    return p


def _setup(preset, latent_shape, batch, dtype) -> tuple[ModelPreset, tuple[int, ...], int]:
    """The Wan preset, its latent shape (with ``batch`` samples if given), the dtype's bytes."""
    p = _wan(preset)
    shape = tuple(latent_shape or p.latent_shape)
    return p, (batch, *shape[1:]) if batch is not None else shape, DTYPE_BYTES[dtype_name(dtype)]


def block_ops(preset: str | ModelPreset, latent_shape: tuple[int, ...] | None = None, *,
              batch: int | None = None, dtype: str = "bf16",
              attention: str = "flash", tp: int = 1, sp: int = 1, ulysses: int = 1) -> list[Op]:
    """The ops of one ``WanTransformerBlock`` on one rank, in execution order. ``tp`` > 1: one
    tensor-parallel rank's share (Megatron split): q/k/v, cross-attention and FFN-up are
    column-parallel (H/tp heads, ffn/tp hidden units a rank), the output projections row-parallel
    (full-width partial sums an all-reduce adds); norms and residual adds replicated on width D.
    ``sp`` > 1: one sequence-parallel rank's share, every token-wise op on S/sp tokens (all the
    weights still read), self-attention as S/sp queries over all S keys. Ulysses (H/U heads of all
    S queries) and ring (S/R queries, all heads) do the same FLOPs; bytes counted as the ring's.
    ``ulysses`` not dividing the heads: the busiest rank attends with ceil(H/U) of them."""
    p, shape, nb = _setup(preset, latent_shape, batch, dtype)
    if p.num_heads % tp or p.ffn_dim % tp:
        raise ValueError(f"tp={tp} must divide num_heads={p.num_heads} and "
                         f"ffn_dim={p.ffn_dim} (each rank owns whole heads)")
    b, s_all, d, hd = shape[0], p.num_tokens(shape), p.dim, p.head_dim
    s = -(-s_all // sp)  # the longest slice
    m, mt, dl, hl, fl = b * s, b * p.text_len, p.dim // tp, p.num_heads // tp, p.ffn_dim // tp
    norm_mod = LAYERNORM_FLOPS + MODULATE_FLOPS
    return [
        # 1. self-attention on the modulated norm; q and k RMS-normalised across heads
        elementwise("norm1", "layernorm", m, d, norm_mod, nb),
        linear("attn1.to_q", m, d, dl, nb), linear("attn1.to_k", m, d, dl, nb),
        linear("attn1.to_v", m, d, dl, nb),
        elementwise("attn1.norm_q", "rmsnorm", m, dl, RMSNORM_FLOPS, nb),
        elementwise("attn1.norm_k", "rmsnorm", m, dl, RMSNORM_FLOPS, nb),
        Op("attn1.rope", "rope", ROPE_FLOPS * 2 * m * dl, 4 * m * dl * nb, (b, s, hl, hd)),
        *attention_ops("attn1", b, -(-hl // ulysses) * ulysses, s, s_all, hd, nb, attention),
        linear("attn1.to_out", m, dl, d, nb),
        elementwise("attn1.gate_residual", "add", m, d, 2, nb, reads=2),
        # 2. cross-attention: queries from the tokens, keys and values from the L text tokens
        elementwise("norm2", "layernorm", m, d, norm_mod, nb),
        linear("attn2.to_q", m, d, dl, nb), linear("attn2.to_k", mt, d, dl, nb),
        linear("attn2.to_v", mt, d, dl, nb),
        elementwise("attn2.norm_q", "rmsnorm", m, dl, RMSNORM_FLOPS, nb),
        elementwise("attn2.norm_k", "rmsnorm", mt, dl, RMSNORM_FLOPS, nb),
        *attention_ops("attn2", b, hl, s, p.text_len, hd, nb, attention),
        *_image_ops(p, m, b * p.image_len, dl, (b, hl, s, hd), nb, attention),
        linear("attn2.to_out", m, dl, d, nb),
        elementwise("attn2.residual", "add", m, d, 1, nb, reads=2),
        # 3. feed-forward on the modulated norm
        elementwise("norm3", "layernorm", m, d, norm_mod, nb),
        linear("ffn.up", m, d, fl, nb),
        elementwise("ffn.gelu", "gelu", m, fl, GELU_FLOPS, nb),
        linear("ffn.down", m, fl, d, nb),
        elementwise("ffn.gate_residual", "add", m, d, 2, nb, reads=2),
    ]


def _image_ops(p: ModelPreset, m: int, mi: int, dl: int, bhsd: tuple[int, ...], nb: int,
               attention: str) -> list[Op]:
    """Wan 2.1 I2V's second cross-attention: the same queries over the picture's CLIP tokens
    (their keys and values projected and normed like the text's), added before ``to_out``."""
    if not p.image_dim:
        return []
    b, hl, s, hd = bhsd
    return [linear("attn2.add_k_proj", mi, p.dim, dl, nb),
            linear("attn2.add_v_proj", mi, p.dim, dl, nb),
            elementwise("attn2.norm_added_k", "rmsnorm", mi, dl, RMSNORM_FLOPS, nb),
            *attention_ops("attn2.image", b, hl, s, p.image_len, hd, nb, attention),
            elementwise("attn2.image_add", "add", m, dl, 1, nb, reads=2)]


def prologue_ops(preset: str | ModelPreset, latent_shape: tuple[int, ...] | None = None, *,
                 batch: int | None = None, dtype: str = "bf16") -> list[Op]:
    """Patch embedding (a Conv3d with kernel = stride = (1, 2, 2)) and the condition embedder."""
    p, (b, c, f, h, w), nb = _setup(preset, latent_shape, batch, dtype)
    m, mt, d, k = b * p.num_tokens((b, c, f, h, w)), b * p.text_len, p.dim, c * 1 * 2 * 2
    patch = Op("patch_embedding", "patchify", 2 * m * d * k,
               (b * c * f * h * w + d * k + m * d) * nb, (b, c, f, h, w, d), weights=d * k)
    return [patch, linear("time_embedder.linear_1", b, p.freq_dim, d, nb),
            linear("time_embedder.linear_2", b, d, d, nb),
            linear("time_proj", b, d, 6 * d, nb),  # the 6 shift/scale/gate vectors of every block
            linear("text_embedder.linear_1", mt, p.text_dim, d, nb),
            elementwise("text_embedder.act", "gelu", mt, d, GELU_FLOPS, nb),
            linear("text_embedder.linear_2", mt, d, d, nb)]


def epilogue_ops(preset: str | ModelPreset, latent_shape: tuple[int, ...] | None = None, *,
                 batch: int | None = None, dtype: str = "bf16") -> list[Op]:
    """Output norm modulated by ``scale_shift_table + temb``, then ``proj_out`` to the patches."""
    p, shape, nb = _setup(preset, latent_shape, batch, dtype)
    m = shape[0] * p.num_tokens(shape)
    return [elementwise("norm_out", "layernorm", m, p.dim, LAYERNORM_FLOPS + MODULATE_FLOPS, nb),
            linear("proj_out", m, p.dim, p.in_channels * 1 * 2 * 2, nb)]


def model_ops(preset: str | ModelPreset, latent_shape: tuple[int, ...] | None = None, *,
              batch: int | None = None, dtype: str = "bf16", attention: str = "flash",
              tp: int = 1, sp: int = 1, num_blocks: int | None = None, prologue: bool = True,
              epilogue: bool = True, ulysses: int = 1) -> list[Op]:
    """One forward: prologue, ``num_blocks`` blocks (default all; counted, not listed), epilogue.
    ``num_blocks`` and the two flags describe one layer-split stage; ``tp`` one TP rank and
    ``sp`` one sequence-parallel rank (the cheap prologue and epilogue run on every rank)."""
    p = _wan(preset)
    kw = dict(batch=batch, dtype=dtype)
    n = p.num_layers if num_blocks is None else num_blocks
    blocks = block_ops(p, latent_shape, attention=attention, tp=tp, sp=sp, ulysses=ulysses, **kw)
    return ([*prologue_ops(p, latent_shape, **kw)] if prologue else []) + [
        replace(op, name=f"blocks.{op.name}").repeated(n) for op in blocks if n
    ] + ([*epilogue_ops(p, latent_shape, **kw)] if epilogue else [])


def step_ops(preset: str | ModelPreset, latent_shape: tuple[int, ...] | None = None, *,
             cfg: bool = True, **kwargs) -> list[Op]:
    """One denoising step: one forward, or two with classifier-free guidance (cond + uncond).
    Two forwards, not one of batch 2: the weights are read twice. (Batching the halves reads
    them once; that matters only where weight bytes dominate, i.e. at tiny token counts.)"""
    ops = model_ops(preset, latent_shape, **kwargs)
    return [op.repeated(2) for op in ops] if cfg else ops


@dataclass(frozen=True)
class Totals:
    """Sums over a list of ops, each weighted by its count."""
    flops: int
    bytes: int
    weights: int  # parameter elements read (a model's weights once per forward)

    @property
    def intensity(self) -> float:
        """FLOP/byte of the whole list (total FLOPs over total bytes)."""
        return self.flops / self.bytes


def totals(ops: list[Op]) -> Totals:
    """Total FLOPs, bytes and weight elements of ``ops`` (counts included)."""
    return Totals(sum(o.flops * o.count for o in ops), sum(o.bytes * o.count for o in ops),
                  sum(o.weights * o.count for o in ops))


# Communication: what a layout must send (bytes of the message; link time is hardware's job)


def step_handoff_bytes(latent_shape: tuple[int, ...], dtype: str = "fp32") -> int:
    """Step-split PP hands the latent (fp32: the sampler's state) to the next stage."""
    return math.prod(latent_shape) * DTYPE_BYTES[dtype_name(dtype)]


def layer_handoff_bytes(preset: str | ModelPreset, latent_shape: tuple[int, ...] | None = None,
                        *, batch: int | None = None, dtype: str = "bf16") -> int:
    """Layer-split PP hands the hidden states h (B, S, D) to the next stage, once per forward."""
    p, shape, nb = _setup(preset, latent_shape, batch, dtype)
    return shape[0] * p.num_tokens(shape) * p.dim * nb


def tp_allreduce_bytes(preset: str | ModelPreset, latent_shape: tuple[int, ...] | None = None,
                       *, batch: int | None = None, dtype: str = "bf16") -> int:
    """Bytes all-reduced per block on every TP rank (the message size, not the link traffic).
    Three row-parallel outputs of (B, S, D) (self-attention, cross-attention, FFN) plus the
    fp32 sums of squares the across-heads RMSNorm needs for q and k: (B, S) twice for
    self-attention, (B, S) and (B, L) for cross-attention."""
    p, shape, nb = _setup(preset, latent_shape, batch, dtype)
    b, s = shape[0], p.num_tokens(shape)
    return 3 * b * s * p.dim * nb + (3 * b * s + b * p.text_len) * 4


def sp_traffic_per_block(preset: str | ModelPreset, latent_shape: tuple[int, ...] | None = None,
                         *, ulysses: int = 1, ring: int = 1, batch: int | None = None,
                         dtype: str = "bf16") -> float:
    """Bytes the busiest sequence-parallel rank sends per block (``ulysses x ring`` ranks, USP).
    Ulysses: Q, K, V to heads (its S/P tokens, the other ranks' heads) and the output back (its
    h = ceil(H/U) heads, the group's other tokens); 4 S/P D (U - 1)/U when U divides H. Ring:
    K and V of its group's S/R tokens for its h heads, R - 1 hops."""
    p, shape, nb = _setup(preset, latent_shape, batch, dtype)
    tokens, hd, heads = shape[0] * p.num_tokens(shape), p.head_dim, p.num_heads
    mine, group, h = tokens / (ulysses * ring), tokens / ring, -(-heads // ulysses)
    a2a = (3 * mine * (heads - h) + (group - mine) * h) * hd * nb if ulysses > 1 else 0.0
    hops = 2 * group * h * hd * nb * (ring - 1)
    return a2a + hops


def ring_allreduce_traffic(message_bytes: int, degree: int) -> float:
    """Bytes each rank sends in a ring all-reduce: 2 (n - 1) / n times the message."""
    return 2 * (degree - 1) / degree * message_bytes
