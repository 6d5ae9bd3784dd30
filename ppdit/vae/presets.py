"""VAE presets: a tiny ``AutoencoderKLWan`` for CPU lessons, and the real Wan 2.1 VAE's config.

Like ``ppdit.model`` for the DiT: every rank that calls ``build_vae`` with the same preset and
seed holds identical random weights, or loads a local checkpoint (never a download).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from diffusers import AutoencoderKLWan

from ppdit.model import build_seeded, own_memory
from ppdit.presets import lookup


@dataclass(frozen=True)
class VAEPreset:
    """A named ``AutoencoderKLWan`` configuration (decoder side is what ppdit runs)."""

    name: str
    base_dim: int  # channel width unit: decoder widths are base_dim x (4, 4, 4, 2, 1) for Wan
    z_dim: int = 16  # latent channels: must equal the DiT's out_channels (16 for Wan 2.1)
    # One entry per resolution level; len - 1 spatial 2x upsamples (Wan: 4 levels -> 8x).
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2  # residual blocks per level (the decoder runs num_res_blocks + 1)
    # Which levels halve time in the encoder; the decoder doubles time at the same levels.
    # Two True entries give the 4x temporal factor behind 1 + 4·(F − 1).
    temperal_downsample: tuple[bool, ...] = (False, True, True)
    notes: str = ""
    # Wan 2.2's VAE: residual up/down blocks, pixels folded 2x2 into channels (patch_size 2:
    # 16x in space, 48 latent channels) and a wider decoder (decoder_base_dim)
    is_residual: bool = False
    patch_size: int | None = None
    decoder_base_dim: int | None = None

    def __post_init__(self) -> None:
        if len(self.temperal_downsample) != len(self.dim_mult) - 1:
            raise ValueError(f"temperal_downsample has {len(self.temperal_downsample)} entries; "
                             f"it needs len(dim_mult) - 1 = {len(self.dim_mult) - 1}")

    @property
    def temporal_factor(self) -> int:
        """Pixel frames per latent frame after the first (4 for Wan 2.1)."""
        return 2 ** sum(self.temperal_downsample)

    @property
    def spatial_factor(self) -> int:
        """Pixels per latent pixel along H and W (8 for Wan 2.1)."""
        return 2 ** (len(self.dim_mult) - 1) * (self.patch_size or 1)

    def diffusers_config(self) -> dict:
        """Keyword arguments for ``AutoencoderKLWan``; a Wan 2.2 preset's latents are
        normalised by mean 0, std 1 (random weights have no statistics to record)."""
        pixels = 3 * (self.patch_size or 1) ** 2  # channels after folding pixels in
        wan22 = {} if self.z_dim == 16 else {"latents_mean": [0.0] * self.z_dim,
                                              "latents_std": [1.0] * self.z_dim}
        return dict(base_dim=self.base_dim, z_dim=self.z_dim, dim_mult=list(self.dim_mult),
                    num_res_blocks=self.num_res_blocks,
                    temperal_downsample=list(self.temperal_downsample),
                    scale_factor_temporal=self.temporal_factor,
                    scale_factor_spatial=self.spatial_factor, is_residual=self.is_residual,
                    patch_size=self.patch_size, decoder_base_dim=self.decoder_base_dim,
                    in_channels=pixels, out_channels=pixels, **wan22)


VAE_PRESETS: dict[str, VAEPreset] = {
    p.name: p
    for p in [
        VAEPreset(
            "tiny", base_dim=8, dim_mult=(1, 2, 4), num_res_blocks=0,
            temperal_downsample=(True, True),
            notes="for CPU lessons and tests: Wan 2.1's temporal structure (causal convs, "
                  "4x time, the single first frame) with narrow channels and 4x (not 8x) "
                  "spatial upsampling; z_dim 16 matches the tiny DiT's latent",
        ),
        VAEPreset(
            "tiny-2.2", base_dim=8, decoder_base_dim=16, z_dim=48, dim_mult=(1, 2, 2),
            num_res_blocks=1, temperal_downsample=(True, True), is_residual=True, patch_size=2,
            notes="for CPU tests: Wan 2.2's VAE (residual blocks, 2x2 pixel patches, 48 "
                  "latent channels, 4x time) narrow, 8x in space",
        ),
        VAEPreset(
            "wan2.2", base_dim=160, decoder_base_dim=256, z_dim=48, is_residual=True,
            patch_size=2, notes="the Wan 2.2 VAE of TI2V-5B: 4x16x16 compression, 48 channels",
        ),
        VAEPreset(
            "wan2.1", base_dim=96, notes="the Wan 2.1 VAE (~127 M parameters in all); load real "
                                         "weights with build_vae(checkpoint=...) on a GPU",
        ),
    ]
}


def get_vae_preset(name: str | VAEPreset) -> VAEPreset:
    """Look a VAE preset up by name; the error lists the names that exist."""
    return lookup(name, VAE_PRESETS, VAEPreset, "VAE preset")


def build_vae(
    preset: str | VAEPreset = "tiny",
    *,
    seed: int = 0,
    checkpoint: str | Path | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> AutoencoderKLWan:
    """Build the VAE in eval mode: random weights from ``seed`` (drawn inside
    ``torch.random.fork_rng`` from one seeded generator: every rank passing the same arguments
    holds the same VAE, the caller's RNG untouched), or a local diffusers ``checkpoint``: the VAE
    folder itself (``config.json`` + weights) or a pipeline snapshot with a ``vae/`` subfolder,
    e.g. of ``Wan-AI/Wan2.1-T2V-1.3B-Diffusers``. Nothing is downloaded. (Wan runs its VAE in fp32.)
    """
    if checkpoint is not None:
        path = Path(checkpoint)
        if (path / "vae" / "config.json").exists():
            path = path / "vae"
        if not (path / "config.json").exists():
            raise ValueError(f"checkpoint={str(checkpoint)!r} is neither a diffusers VAE folder "
                             "nor a pipeline folder with vae/config.json; no weights are "
                             "downloaded at run time")
        if str(device) == "meta":  # shapes only (weights are not read)
            with torch.device("meta"):
                return AutoencoderKLWan.from_config(AutoencoderKLWan.load_config(path))
        vae = AutoencoderKLWan.from_pretrained(path, torch_dtype=dtype, local_files_only=True)
        return own_memory(vae.to(device)).eval().requires_grad_(False)  # as build_model does
    vae = build_seeded(AutoencoderKLWan, get_vae_preset(preset).diffusers_config(), seed, device)
    if dtype != torch.float32:  # (a .to(dtype=float32) would only print diffusers' cast warning)
        vae = vae.to(dtype)
    return vae.eval().requires_grad_(False)
