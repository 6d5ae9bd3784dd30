"""FLOPs and minimum bytes of the Wan VAE decoder (``diffusers.AutoencoderKLWan``), walked from
its config: the conv3d-dominated work rank 0 does after the DiT (lessons 09 and 10)."""

from __future__ import annotations

import math
from itertools import pairwise

from ppdit.analysis.roofline import DTYPE_BYTES, Op, attention_ops, dtype_name

# The constructor defaults of ``diffusers.AutoencoderKLWan`` (Wan 2.1's VAE) that the count
# reads, written out: diffusers takes seconds to import, and ``ppdit plan`` answers without it.
# ``tests/unit/test_roofline.py`` checks them against the installed diffusers.
WAN21_VAE = {"base_dim": 96, "decoder_base_dim": None, "dim_mult": [1, 2, 4, 4],
             "num_res_blocks": 2, "temperal_downsample": [False, True, True],
             "is_residual": False, "out_channels": 3}
# Wan 2.2's (TI2V-5B): residual up blocks that keep their width through the upsampler, a wider
# decoder, 12 output channels unfolded into 2x2 pixels (no FLOPs)
WAN22_VAE = {"base_dim": 160, "decoder_base_dim": 256, "dim_mult": [1, 2, 4, 4],
             "num_res_blocks": 2, "temperal_downsample": [False, True, True],
             "is_residual": True, "out_channels": 12}
VAE_CONFIGS = {"wan2.1": WAN21_VAE, "wan2.2": WAN22_VAE}  # by ModelPreset.vae


def _conv(name: str, b: int, cin: int, cout: int, kernel: tuple[int, int, int],
          out: tuple[int, int, int], nbytes: int) -> Op:
    """A stride-1, same-size conv writing ``out`` = (T, H, W) from an input of that size."""
    voxels, taps = b * math.prod(out), math.prod(kernel)
    return Op(name, "conv", 2 * voxels * cout * cin * taps,
              (voxels * cin + cout * cin * taps + voxels * cout) * nbytes,
              (b, cin, *out, cout, *kernel), weights=cout * cin * taps)


def vae_decoder_ops(latent_shape: tuple[int, ...], *, dtype: str = "bf16",
                    attention: str = "flash", config: dict | None = None) -> list[Op]:
    """Convolutions and the mid-block attention of ``AutoencoderKLWan.decode`` for one latent,
    mirroring diffusers' ``WanDecoder3d`` (Wan 2.1; Wan 2.2's residual blocks keep their width
    through the upsamplers, ``WAN22_VAE``): conv_in, a mid block
    (resnet, per-frame single-head attention, resnet), four up blocks of ``num_res_blocks + 1``
    resnets (two 3x3x3 causal convs each, a 1x1x1 shortcut where the width changes) with 2x spatial
    upsampling (nearest + 3x3 conv) after the first three, and a (3,1,1) time conv doubling the
    frames in the temporally upsampling ones. Decoded a latent frame at a time, the first frame
    never enters a time conv: F latent frames become 1 + 2 (F - 1), then 1 + 4 (F - 1) frames.
    Counted: every conv (FLOPs exact) and the attention. Not counted (an explicit approximation):
    RMS norms, SiLU, the nearest upsampling copies and residual adds (bandwidth-bound, a few passes
    over each activation); weights count once though the decode re-reads them every latent frame."""
    cfg = {**WAN21_VAE, **(config or {})}
    residual = cfg["is_residual"]
    nb, (b, z, t, h, w) = DTYPE_BYTES[dtype_name(dtype)], latent_shape
    mult, base = cfg["dim_mult"], cfg["decoder_base_dim"] or cfg["base_dim"]
    dims = [base * u for u in [mult[-1], *mult[::-1]]]
    up_time = cfg["temperal_downsample"][::-1]
    ops = [_conv("post_quant_conv", b, z, z, (1, 1, 1), (t, h, w), nb),
           _conv("conv_in", b, z, dims[0], (3, 3, 3), (t, h, w), nb)]

    def resnet(name: str, cin: int, cout: int) -> list[Op]:
        out = [_conv(f"{name}.conv1", b, cin, cout, (3, 3, 3), (t, h, w), nb),
               _conv(f"{name}.conv2", b, cout, cout, (3, 3, 3), (t, h, w), nb)]
        if cin != cout:
            out.append(_conv(f"{name}.conv_shortcut", b, cin, cout, (1, 1, 1), (t, h, w), nb))
        return out

    d0 = dims[0]
    ops += resnet("mid.resnets.0", d0, d0)
    ops.append(_conv("mid.attention.to_qkv", b, d0, 3 * d0, (1, 1, 1), (t, h, w), nb))
    ops += attention_ops("mid.attention", b * t, 1, h * w, h * w, d0, nb, attention)
    ops.append(_conv("mid.attention.proj", b, d0, d0, (1, 1, 1), (t, h, w), nb))
    ops += resnet("mid.resnets.1", d0, d0)
    for i, (cin, cout) in enumerate(pairwise(dims)):
        cin = cin // 2 if i > 0 and not residual else cin  # Wan 2.1's upsampler halved it
        for j in range(cfg["num_res_blocks"] + 1):
            ops += resnet(f"up_blocks.{i}.resnets.{j}", cin if j == 0 else cout, cout)
        if i == len(mult) - 1:
            break
        if up_time[i]:
            ops.append(_conv(f"up_blocks.{i}.time_conv", b, cout, 2 * cout, (3, 1, 1),
                             (t - 1, h, w), nb))
            t = 1 + 2 * (t - 1)
        h, w = 2 * h, 2 * w
        ops.append(_conv(f"up_blocks.{i}.upsample_conv", b, cout,
                         cout if residual else cout // 2, (1, 3, 3), (t, h, w), nb))
    ops.append(_conv("conv_out", b, dims[-1], cfg["out_channels"], (3, 3, 3), (t, h, w), nb))
    return ops
