"""The patch-parallel decode: which decoder layers need their neighbours, and their wrappers.

Going through ``WanDecoder3d`` layer by layer (diffusers' ``autoencoder_kl_wan.py``):

* ``WanRMS_norm`` (``F.normalize(x, dim=1)``, over one position's channels), SiLU, dropout, the
  1x1x1 convs, a temporal upsample's (3, 1, 1) ``time_conv``, nearest 2x upsampling: local, no
  statistic spans positions (``check_decoder`` refuses any layer it does not know to be local).
* ``WanCausalConv3d`` 3x3x3 and the ``Conv2d`` 3x3 after each upsample: read one row above and
  below — **halo** (``halo.fill_halos``). Each rank keeps the causal cache of its own rows; the
  halo is exchanged *after* the cached frames are concatenated, so those frames' rows come too.
* ``WanAttentionBlock`` (mid block): one head over all H x W positions of a frame — global. A
  rank computes q, k, v for its positions (1x1 convs), gathers all k and v, attends with its q.

The wrappers replace layers in a *copy* of the decoder sharing the VAE's weights, which
``StreamingDecoder`` drives as it drives the original: the decode streams chunk by chunk for
free, and ``vae`` itself is never touched.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from diffusers import AutoencoderKLWan
from diffusers.models.autoencoders.autoencoder_kl_wan import (
    DupUp3D,
    WanAttentionBlock,
    WanCausalConv3d,
    WanDecoder3d,
    WanMidBlock,
    WanResample,
    WanResidualBlock,
    WanResidualUpBlock,
    WanRMS_norm,
    WanUpBlock,
    WanUpsample,
)
from torch import nn

from ppdit.parallel.vae_patch.halo import RowGroup, fill_halos, gather_rows, split_rows
from ppdit.vae.streaming import StreamingDecoder, iter_chunks

# Layers whose output at a position depends only on that position (or, for the listed convs
# with a spatial kernel, on the rows the halo brings): anything else in the decoder is refused.
# (Wan 2.2's residual up block adds DupUp3D: channels repeated, then shuffled into 2x2 pixels.)
LOCAL_LAYERS = (WanDecoder3d, WanMidBlock, WanUpBlock, WanResidualBlock, WanResample, WanUpsample,
                WanRMS_norm, WanAttentionBlock, WanCausalConv3d, nn.Conv2d, nn.SiLU, nn.Dropout,
                nn.Identity, nn.Sequential, nn.ModuleList, WanResidualUpBlock, DupUp3D)
GATHER = ("all", "first", "none")  # who gets the whole frames: every rank, group rank 0, nobody
# A rank's convolutions see a narrower input (its rows + halos) than one process's, so a kernel
# may block the same sums differently; attention sums over the same keys with fewer queries.
# On this CPU (tiny VAE, 1 thread per rank, 2 and 3 ranks) the per-frame decode came out
# bitwise equal to decode_full for an 8-wide latent and within 1.6e-6 for a 5-wide one; chunks
# of 2 frames differ from it by as much on one process too (CHUNKED_TOL in test_vae.py).
# Pixels are clamped to [-1, 1], where one 8-bit level is 2/255: 1e-5 absolute leaves room for
# other kernels and changes nothing visible.
PATCH_TOL = {"rtol": 1e-4, "atol": 1e-5}


def halo_width(conv: nn.Module) -> int:
    """Rows a convolution reads above and below each output row (its height padding)."""
    if isinstance(conv, WanCausalConv3d):
        return conv._padding[2]  # (w, w, h, h, 2·t, 0): diffusers pads in forward, not in conv
    if isinstance(conv, nn.Conv2d):
        return conv.padding[0]
    return 0


def check_decoder(decoder: nn.Module) -> int:
    """Confirm every layer is one whose parallel form is known; return the widest halo."""
    for name, m in decoder.named_modules():
        if not isinstance(m, LOCAL_LAYERS):
            raise ValueError(f"decoder layer {name} ({type(m).__name__}) is not known to be "
                             "local per position: it may need halos or all-reduced statistics")
        if isinstance(m, nn.Conv2d) and halo_width(m) and (m.stride != (1, 1)
                                                           or m.padding_mode != "zeros"):
            raise ValueError(f"{name}: only stride-1 zero-padded convolutions are halo'd")
    return max(halo_width(m) for m in decoder.modules())


def check_split(decoder: nn.Module, latent_height: int, ranks: int) -> tuple[int, ...]:
    """Latent rows per rank of a split decode, or the ``ValueError`` naming the rule broken:
    known layers only, each rank at least the widest halo. Needs no weights, so a caller can
    refuse before denoising, on a decoder built on the meta device (``build_vae``'s)."""
    return split_rows(latent_height, ranks, check_decoder(decoder))


class HaloCausalConv3d(nn.Module):
    """``WanCausalConv3d`` whose height padding comes from the neighbours (same weights)."""

    def __init__(self, inner: WanCausalConv3d, rows: RowGroup):
        super().__init__()
        self.inner, self.rows, self.width = inner, rows, halo_width(inner)

    def forward(self, x: torch.Tensor, cache_x: torch.Tensor | None = None) -> torch.Tensor:
        # As WanCausalConv3d.forward: cached frames first, zero frames for what the cache lacks.
        padding = list(self.inner._padding)
        if cache_x is not None and padding[4] > 0:
            x = torch.cat([cache_x.to(x.device), x], dim=2)  # (B, C, cache + T, h, W)
            padding[4] -= cache_x.shape[2]
        x = fill_halos(F.pad(x, padding), self.width, self.rows)  # (B, C, T', h + 2, W + 2)
        return nn.Conv3d.forward(self.inner, x)  # inner.padding is (0, 0, 0): no second pad


class HaloConv2d(nn.Module):
    """The 3x3 ``Conv2d`` after an upsample, its row padding from the neighbours."""

    def __init__(self, inner: nn.Conv2d, rows: RowGroup):
        super().__init__()
        self.inner, self.rows, self.width = inner, rows, halo_width(inner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pw = self.inner.padding[1]
        x = fill_halos(F.pad(x, (pw, pw, self.width, self.width)), self.width, self.rows)
        c = self.inner
        return F.conv2d(x, c.weight, c.bias, c.stride, 0, c.dilation, c.groups)


class PatchAttention(nn.Module):
    """``WanAttentionBlock`` over a frame split by rows: own queries, every rank's keys/values.

    ``split`` is the latent rows per rank; at this layer each holds ``split[r] · scale`` rows."""

    def __init__(self, inner: WanAttentionBlock, rows: RowGroup, split: tuple[int, ...]):
        super().__init__()
        self.inner, self.rows, self.split = inner, rows, split

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, t, h, w = x.shape
        identity = x
        x = x.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w)
        qkv = self.inner.to_qkv(self.inner.norm(x))  # norm and 1x1 conv: per position
        qkv = qkv.reshape(b * t, 1, c * 3, h * w).permute(0, 1, 3, 2)  # (B·T, 1, h·w, 3C)
        scale = h // self.split[self.rows.rank]
        positions = tuple(n * scale * w for n in self.split)  # rows are contiguous in h·w
        kv = gather_rows(qkv[..., c:], positions, self.rows, dim=2)  # (B·T, 1, H·W, 2C)
        q, k, v = qkv[..., :c].contiguous(), kv[..., :c], kv[..., c:]
        x = F.scaled_dot_product_attention(q, k, v)  # (B·T, 1, h·w, C)
        x = self.inner.proj(x.squeeze(1).permute(0, 2, 1).reshape(b * t, c, h, w))
        return x.view(b, t, c, h, w).permute(0, 2, 1, 3, 4) + identity


def _wrap(m: nn.Module, rows: RowGroup, split: tuple[int, ...]) -> nn.Module | None:
    """The parallel form of ``m``, or None where ``m`` is local as it is."""
    if isinstance(m, WanAttentionBlock):
        return PatchAttention(m, rows, split)
    if isinstance(m, WanCausalConv3d) and halo_width(m):
        return HaloCausalConv3d(m, rows)
    if isinstance(m, nn.Conv2d) and halo_width(m):
        return HaloConv2d(m, rows)
    return None


def patch_decoder(decoder: WanDecoder3d, rows: RowGroup, split: tuple[int, ...]) -> WanDecoder3d:
    """A copy of ``decoder`` sharing its weights (a deepcopy with every parameter and buffer
    memoised as itself), with every non-local layer wrapped: the original is left as it was."""
    check_decoder(decoder)
    shared = {id(t): t for t in [*decoder.parameters(), *decoder.buffers()]}
    twin = copy.deepcopy(decoder, memo=shared)
    for name, m in list(twin.named_modules()):
        wrapped = _wrap(m, rows, split)
        if wrapped is not None:
            parent, _, attr = name.rpartition(".")
            setattr(twin.get_submodule(parent), attr, wrapped)
    return twin


class PatchVAE(nn.Module):
    """What ``StreamingDecoder`` reads of a VAE, with the patch-parallel decoder in place."""

    def __init__(self, vae: AutoencoderKLWan, decoder: WanDecoder3d):
        super().__init__()
        self.post_quant_conv, self.decoder = vae.post_quant_conv, decoder  # shared weights
        self.config, self.use_tiling = vae.config, vae.use_tiling


class PatchStreamingDecoder(StreamingDecoder):
    """``StreamingDecoder`` over a row split: ``push(chunk)`` takes the whole-height latent chunk
    (B, z, F, H, W) on every rank, decodes this rank's rows with its own causal cache, and returns
    the pixels as ``gather`` says: "all" the whole frames on every rank, "first" on group rank 0
    (``None`` elsewhere), "none" this rank's rows (B, 3, T, rows · 8, W · 8)::

        latent rows   0 ..... H-1         pixel rows    (8x for Wan, 4x for the tiny VAE)
        rank 0        [0, s0)        ->   [0, 8 s0)
        rank 1        [s0, s0 + s1)  ->   [8 s0, 8 (s0 + s1))   halos: 1 row per 3x3 conv
    """

    def __init__(self, vae: AutoencoderKLWan, latent_height: int, rows: RowGroup, *,
                 gather: str = "all"):
        if gather not in GATHER:
            raise ValueError(f"gather={gather!r} is not one of {GATHER}")
        self.rows = rows
        self.split = check_split(vae.decoder, latent_height, self.rows.world)
        self.start = sum(self.split[:self.rows.rank])
        self.gather = gather
        twin = patch_decoder(vae.decoder, self.rows, self.split)
        super().__init__(PatchVAE(vae, twin))

    def push(self, chunk: torch.Tensor) -> torch.Tensor | None:
        """Decode this rank's rows of the next latent frames; gather as ``gather`` says."""
        if chunk.ndim != 5 or chunk.shape[3] != sum(self.split):
            raise ValueError(f"chunk of shape {tuple(chunk.shape)}: expected (B, z, F, H, W) "
                             f"with H = {sum(self.split)}, the height this decoder was made for")
        mine = chunk[:, :, :, self.start:self.start + self.split[self.rows.rank]]
        out = super().push(mine)  # (B, 3, T, rows · s, W · s)
        if self.gather == "none":
            return out
        s = out.shape[3] // mine.shape[3]  # pixel rows per latent row
        sizes = tuple(n * s for n in self.split)
        return gather_rows(out, sizes, self.rows, dim=3, dst=0 if self.gather == "first" else None)


def decode_patch_parallel(vae: AutoencoderKLWan, latents: torch.Tensor, rows: RowGroup, *,
                          chunk_frames: int = 1, gather: str = "all") -> torch.Tensor | None:
    """Decode ``latents`` (B, z, F, H, W), held whole by every rank of ``rows``, split by rows
    (``RowGroup.of(group, ctx.wire)``: the rank's wire, so NCCL's rules and staging hold).

    ``chunk_frames=1`` runs the very per-frame loop of ``decode_full`` (diffusers' ``_decode``):
    equal to it up to ``PATCH_TOL``; larger chunks stream as ``decode_streaming`` does.
    ``gather`` as in ``PatchStreamingDecoder``."""
    with PatchStreamingDecoder(vae, latents.shape[3], rows, gather=gather) as decoder:
        parts = [decoder.push(c) for c in iter_chunks(latents, chunk_frames)]
    return None if parts[0] is None else torch.cat(parts, dim=2)
