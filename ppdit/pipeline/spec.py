"""What to generate (``GenerateSpec``) and the rules a request must satisfy before any rank
starts: every check names its rule and the values, so a typo costs a second, not a launch."""

from __future__ import annotations

from dataclasses import dataclass

LAYOUTS = ("single", "step", "layer", "tp", "sp", "pp_tp", "cfg")


@dataclass(frozen=True)
class GenerateSpec:
    """One text-to-video request and how to run it; the same on every rank."""

    checkpoint: str  # local pipeline folder
    prompt: str
    negative_prompt: str = ""  # diffusers' default: the empty prompt
    layout: str = "single"
    ranks: int = 1  # world size (pp_tp: 4 = 2 stages x 2 TP ranks)
    dtype: str = "fp32"  # transformer and text encoder; the VAE stays fp32
    num_steps: int = 4
    num_frames: int = 5  # pixel frames: 4k + 1 for Wan's VAE
    height: int = 32
    width: int = 32
    seed: int = 0  # CPU torch.Generator().manual_seed(seed), as diffusers documents
    guidance_scale: float = 5.0  # > 1 turns on CFG (diffusers' rule)
    # text tokens: None = the tokenizer's model_max_length, at most 512 (Wan's tokenizer: 512,
    # WanPipeline's default; models/toy_shapes was trained at 16 and says so in its tokenizer)
    max_sequence_length: int | None = None
    solver: str = "folder"  # "folder": the pipeline's scheduler; "euler": ppdit's baseline
    timeout_s: float = 600

    @property
    def uses_cfg(self) -> bool:
        """Whether the negative prompt is run too (WanPipeline: guidance_scale > 1)."""
        return self.guidance_scale > 1.0


def latent_shape(spec: GenerateSpec, vae_factors: tuple[int, int], channels: int = 16
                 ) -> tuple[int, int, int, int, int]:
    """(1, C, (frames - 1) / t + 1, H / s, W / s): ``WanPipeline.prepare_latents``'s shape."""
    t, s = vae_factors
    return (1, channels, (spec.num_frames - 1) // t + 1, spec.height // s, spec.width // s)


def check_spec(spec: GenerateSpec, vae_factors: tuple[int, int], transformer_config: dict
               ) -> None:
    """Every rule a request must meet, checked before launching (``ValueError`` naming it).

    diffusers *rounds* a bad frame count or size with a warning; ppdit refuses instead, so the
    video you get is the one you asked for.
    """
    t, s = vae_factors
    patch = transformer_config.get("patch_size", (1, 2, 2))
    heads = transformer_config["num_attention_heads"]
    layers = transformer_config["num_layers"]
    if spec.layout not in LAYOUTS:
        raise ValueError(f"layout={spec.layout!r} is not one of {LAYOUTS}")
    if spec.num_steps < 1:
        raise ValueError(f"steps={spec.num_steps} must be >= 1")
    if spec.num_frames < 1 or (spec.num_frames - 1) % t:
        raise ValueError(f"frames={spec.num_frames} must be {t}k + 1 (1, {t + 1}, {2 * t + 1}, "
                         f"...): the Wan VAE turns each latent frame after the first into {t}")
    for name, size in (("height", spec.height), ("width", spec.width)):
        if size < 1 or size % (s * patch[1]):
            raise ValueError(f"{name}={size} must be a positive multiple of {s * patch[1]} "
                             f"(VAE factor {s} x patch {patch[1]})")
    _check_ranks(spec, heads, layers, (spec.num_frames - 1) // t + 1, spec.height // s // patch[1]
                 * (spec.width // s // patch[2]))


def _check_ranks(spec: GenerateSpec, heads: int, layers: int, latent_frames: int,
                 tokens_per_frame: int) -> None:
    r, layout = spec.ranks, spec.layout
    if r < 1:
        raise ValueError(f"ranks={r} must be >= 1")
    if layout == "single" and r != 1:
        raise ValueError(f"layout 'single' runs on 1 rank, got ranks={r}")
    if layout in ("step", "pp_tp") and spec.num_steps < (r // 2 if layout == "pp_tp" else r):
        raise ValueError(f"steps={spec.num_steps} cannot be split over {r} step stages: "
                         "step split needs at least one step per stage")
    if layout == "layer" and r > layers:
        raise ValueError(f"ranks={r} exceeds the transformer's {layers} blocks: layer split "
                         "needs at least one block per stage")
    if layout in ("tp", "sp") and heads % r:
        raise ValueError(f"num_attention_heads={heads} is not divisible by ranks={r}: "
                         f"{layout.upper()} gives every rank whole heads")
    if layout == "sp" and r > latent_frames * tokens_per_frame:
        raise ValueError(f"ranks={r} exceeds the {latent_frames * tokens_per_frame} tokens: "
                         "sequence parallelism needs at least one token per rank")
    if layout == "pp_tp" and (r % 2 or heads % 2 or r < 4):
        raise ValueError(f"layout 'pp_tp' runs stages of 2 TP ranks: ranks={r} must be an even "
                         f"number >= 4 and heads={heads} divisible by 2")
    if layout == "cfg":
        if r != 2:
            raise ValueError(f"layout 'cfg' runs the conditional and unconditional halves on "
                             f"exactly 2 ranks, got ranks={r}")
        if not spec.uses_cfg:
            raise ValueError(f"layout 'cfg' needs guidance (guidance_scale > 1), got "
                             f"{spec.guidance_scale}: without it there is no second half")


__all__ = ["LAYOUTS", "GenerateSpec", "check_spec", "latent_shape"]
