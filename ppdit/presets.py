"""The sizes of every Wan transformer ppdit knows, as plain values: no torch, no diffusers.

``ppdit plan`` (formulas only), the roofline and the memory model read a model's layers, heads
and widths from here and answer before torch could even be imported; ``ppdit.model`` builds the
real module from the same preset (``ModelPreset.diffusers_config``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelPreset:
    """A named Wan transformer size plus the latent and text shapes it is meant to run with."""

    name: str
    num_layers: int  # transformer blocks: what layer-split PP partitions
    num_heads: int  # attention heads: what TP splits (must divide by the TP degree)
    head_dim: int  # per-head width; D = num_heads * head_dim
    ffn_dim: int  # FFN hidden width: TP splits it too
    text_dim: int  # width of the text encoder output (umT5-XXL: 4096)
    text_len: int  # text tokens per prompt (Wan pads prompts to 512)
    freq_dim: int = 256  # sinusoidal timestep embedding width
    in_channels: int = 16  # latent channels of the Wan VAE
    # image-to-video (Wan 2.2 I2V-A14B): channels the DiT reads beside the latent, the image's
    # latent video and its mask (16 + 4); the DiT still predicts in_channels
    condition_channels: int = 0
    # Wan 2.1 I2V: the width of the CLIP image tokens its cross-attention also reads (None: none)
    # and their count (ViT-H/14 at 224 px: 16 x 16 patches and the class token)
    image_dim: int | None = None
    image_len: int = 257
    # Default latent (B, C, F, H, W) for this preset. tiny: 5*8*8 = 320 tokens after 1x2x2 patches.
    latent_shape: tuple[int, ...] = (1, 16, 5, 16, 16)
    rope_max_seq_len: int = 1024  # rope table length per axis; must exceed F, H/2, W/2
    notes: str = ""
    kind: str = "wan"  # "wan", or "dummy": the earlier report's nearly free stand-in model
    # Wan 2.2's mixture of experts: this many transformers of these sizes, one active per step
    # (high noise, then low: switched at timestep ``boundary``, flow shift ``shift``)
    experts: int = 1
    boundary: float = 875.0
    shift: float = 12.0
    vae: str = "wan2.1"  # the VAE preset that makes its latents (ppdit.vae.presets)
    # Wan 2.2 TI2V: a timestep per token (``WanPipeline(expand_timesteps=True)``), so frames
    # held fixed (an image's) sit at t = 0 while the rest denoise
    expand_timesteps: bool = False

    @property
    def dim(self) -> int:
        """Hidden size D, the width of the tokens that travel between layer stages."""
        return self.num_heads * self.head_dim

    def diffusers_config(self) -> dict:
        """Keyword arguments for ``WanTransformer3DModel`` (Wan 2.1 text-to-video flavour)."""
        return dict(
            patch_size=(1, 2, 2),
            num_attention_heads=self.num_heads,
            attention_head_dim=self.head_dim,
            in_channels=self.in_channels + self.condition_channels,
            out_channels=self.in_channels,
            text_dim=self.text_dim,
            freq_dim=self.freq_dim,
            ffn_dim=self.ffn_dim,
            num_layers=self.num_layers,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            eps=1e-6,
            rope_max_seq_len=self.rope_max_seq_len,
            image_dim=self.image_dim,
            added_kv_proj_dim=None if self.image_dim is None else self.dim,
        )

    def num_tokens(self, latent_shape: tuple[int, ...] | None = None) -> int:
        """Tokens per sample S = F * (H/2) * (W/2) for Wan's (1, 2, 2) patches."""
        _, _, f, h, w = latent_shape or self.latent_shape
        return f * (h // 2) * (w // 2)


PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in [
        ModelPreset(
            "tiny", num_layers=4, num_heads=4, head_dim=16, ffn_dim=128, text_dim=32, text_len=8,
            freq_dim=32, rope_max_seq_len=256, vae="tiny",
            notes="for tests: milliseconds per forward on one CPU thread",
        ),
        ModelPreset(
            "small", num_layers=8, num_heads=8, head_dim=32, ffn_dim=1024, text_dim=64, text_len=16,
            freq_dim=64, rope_max_seq_len=256, vae="tiny",
            notes="for notebook demos on CPU: a forward costs tens of milliseconds",
        ),
        ModelPreset(
            "dummy", num_layers=0, num_heads=1, head_dim=1, ffn_dim=1, text_dim=1, text_len=1,
            in_channels=8, latent_shape=(1, 8, 8, 32, 32), kind="dummy",
            notes="the earlier report's DummyUNet setting: almost no compute, so a run "
                  "measures only the machinery around it",
        ),
        ModelPreset(
            "tiny-ti2v", num_layers=3, num_heads=6, head_dim=16, ffn_dim=128, text_dim=32,
            text_len=8, freq_dim=32, rope_max_seq_len=256, in_channels=48,
            latent_shape=(1, 48, 3, 8, 8), vae="tiny-2.2", expand_timesteps=True,
            notes="for tests: Wan 2.2 TI2V's shape of problem (48 latent channels, a timestep "
                  "per token, 6 heads: uneven under Ulysses 4) at a CPU's size",
        ),
        ModelPreset(
            "wan2.1-1.3b", num_layers=30, num_heads=12, head_dim=128, ffn_dim=8960,
            text_dim=4096, text_len=512, latent_shape=(1, 16, 21, 60, 104),
            notes="Wan 2.1 T2V 1.3B; 480p x 81 frames = 32,760 tokens; GPU",
        ),
        ModelPreset(
            "wan2.1-14b", num_layers=40, num_heads=40, head_dim=128, ffn_dim=13824,
            text_dim=4096, text_len=512, latent_shape=(1, 16, 21, 60, 104),
            notes="Wan 2.1 T2V 14B; ~28 GB of bf16 weights; GPUs",
        ),
        ModelPreset(
            "wan2.2-a14b", num_layers=40, num_heads=40, head_dim=128, ffn_dim=13824,
            text_dim=4096, text_len=512, latent_shape=(1, 16, 21, 60, 104), experts=2,
            notes="Wan 2.2 T2V A14B: two 14B experts (high, low noise), 14B active per step",
        ),
        ModelPreset(
            "wan2.1-i2v-14b", num_layers=40, num_heads=40, head_dim=128, ffn_dim=13824,
            text_dim=4096, text_len=512, latent_shape=(1, 16, 21, 60, 104),
            condition_channels=20, image_dim=1280,
            notes="Wan 2.1 I2V 14B: the image's latent video and mask beside the noise, and its "
                  "257 CLIP tokens in every cross-attention",
        ),
        ModelPreset(
            "wan2.2-i2v-a14b", num_layers=40, num_heads=40, head_dim=128, ffn_dim=13824,
            text_dim=4096, text_len=512, latent_shape=(1, 16, 21, 60, 104), experts=2,
            condition_channels=20, boundary=900.0,
            notes="Wan 2.2 I2V A14B: two 14B experts reading the image's latent video and "
                  "mask beside the noise (36 channels in, 16 out)",
        ),
        ModelPreset(
            "wan2.2-ti2v-5b", num_layers=30, num_heads=24, head_dim=128, ffn_dim=14336,
            text_dim=4096, text_len=512, in_channels=48, latent_shape=(1, 48, 31, 44, 80),
            vae="wan2.2", expand_timesteps=True, shift=5.0,
            notes="Wan 2.2 TI2V 5B: text or image to video, 720p x 121 frames = 27,280 tokens "
                  "through the 4x16x16 VAE; a timestep per token",
        ),
    ]
}


def get_preset(name: str | ModelPreset) -> ModelPreset:
    """Look a preset up by name; the error lists the names that exist."""
    return lookup(name, PRESETS, ModelPreset, "model preset")


def lookup(name, table: dict, cls: type, what: str):
    """``name`` itself if it already is a ``cls``, else ``table[name]``; an unknown name is a
    ``ValueError`` listing the names that exist (shared by the DiT and VAE presets)."""
    if isinstance(name, cls):
        return name
    if name not in table:
        raise ValueError(f"unknown {what} {name!r}: choose one of {sorted(table)}")
    return table[name]
