"""What to generate (``GenerateSpec``) and the rules a request must satisfy before any rank
starts: every check names its rule and the values, so a typo costs a second, not a launch.

It imports nothing heavy: ``ppdit --help`` lists the layouts from here without loading torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from ppdit.parallel.layout import SHORTHANDS, Layout

LAYOUTS = SHORTHANDS  # the names; any "axis=degree,..." composition is a layout too


@dataclass(frozen=True)
class GenerateSpec:
    """One text-to-video request and how to run it; the same on every rank."""

    checkpoint: str  # local pipeline folder
    prompt: str
    negative_prompt: str = ""  # diffusers' default: the empty prompt
    # how the denoising is spread over ranks (``parallel.layout``: parsed once, at the boundary)
    layout: Layout = field(default_factory=Layout)
    # transformer and text encoder (the VAE stays fp32); "auto": as the folder stores it, read
    # when the spec is made (Wan 14B: bf16's 28.6 GB, not fp32's 57 GB, on every rank)
    dtype: str = "auto"
    num_steps: int = 4
    num_frames: int = 5  # pixel frames: 4k + 1 for Wan's VAE
    height: int = 32
    width: int = 32
    seed: int = 0  # CPU torch.Generator().manual_seed(seed), as diffusers documents
    guidance_scale: float = 5.0  # > 1 turns on CFG (diffusers' rule)
    # Wan 2.2: the low-noise expert's scale (None: guidance_scale), WanPipeline's guidance_scale_2
    guidance_scale_2: float | None = None
    # First-Block-Cache's threshold (``ppdit.cache``; None: no step caching), as diffusers'
    # ``enable_cache(FirstBlockCacheConfig(threshold))``
    cache_threshold: float | None = None
    # text tokens: None = the tokenizer's model_max_length, at most 512 (Wan's tokenizer: 512,
    # WanPipeline's default; models/toy_shapes was trained at 16 and says so in its tokenizer)
    max_sequence_length: int | None = None
    solver: str = "folder"  # "folder": the pipeline's scheduler; "euler": ppdit's baseline
    # None: from the work (``runtime.comm.wire.START_S`` until the ranks have timed a step,
    # then ``work_bound`` of it); seconds: a fixed bound of the run and of every wait inside it
    timeout_s: float | None = None
    # where umT5 encodes the prompts, once, before any DiT weight loads: "device" (where rank 0
    # computes, then freed) or "cpu" (offloaded: never on a GPU, slower)
    text_encoder: str = "device"
    # ranks that decode the latent, split by rows (``parallel.vae_patch``; 1: one device). A
    # second launch after the denoising ranks end: each holds the VAE and its own rows' pixels.
    vae_ranks: int = 1
    # Wan 2.2 TI2V: a picture file of the video's size, its first frame (``t2v.image``)
    image: str | None = None

    def __post_init__(self) -> None:
        if self.dtype == "auto":  # once: a replace() keeps the dtype it resolved to
            object.__setattr__(self, "dtype", stored_dtype(self.checkpoint))

    @property
    def ranks(self) -> int:
        """The world size: the layout's ranks."""
        return self.layout.ranks

    @property
    def uses_cfg(self) -> bool:
        """Whether the negative prompt is run too (WanPipeline: guidance_scale > 1)."""
        return self.guidance_scale > 1.0


TEXT_ENCODER_PLACES = ("device", "cpu")
STORED = {"F32": "fp32", "BF16": "bf16", "F16": "fp16"}  # safetensors' dtype names -> ppdit's


def stored_dtype(checkpoint: str) -> str:
    """The dtype the folder's transformer is stored in, read from its safetensors headers (no
    tensor loads): the one holding the most bytes (bf16 releases keep a few tensors in fp32)."""
    from ppdit.checkpoint.folder import check_folder, weight_headers  # torch: not at --help

    held: dict[str, int] = {}
    for header in weight_headers(check_folder(checkpoint) / "transformer").values():
        for t in (t for name, t in header.items() if name != "__metadata__"):
            start, stop = t["data_offsets"]
            held[t["dtype"]] = held.get(t["dtype"], 0) + stop - start
    stored = max(held, key=held.get, default="no tensors")
    if stored not in STORED:
        raise ValueError(f"{checkpoint}/transformer stores {stored}: choose a dtype of "
                         f"{sorted(STORED.values())}")
    return STORED[stored]


def latent_shape(spec: GenerateSpec, vae_factors: tuple[int, int], channels: int = 16
                 ) -> tuple[int, int, int, int, int]:
    """(1, C, (frames - 1) / t + 1, H / s, W / s): ``WanPipeline.prepare_latents``'s shape."""
    t, s = vae_factors
    return (1, channels, (spec.num_frames - 1) // t + 1, spec.height // s, spec.width // s)


def check_spec(spec: GenerateSpec, vae_factors: tuple[int, int], transformer_config: dict
               ) -> None:
    """The request's own rules, checked before launching (``ValueError`` naming each); the
    layout's (steps per stage, heads per rank, ...) are its plan's: ``parallel.layout.check_model``
    and ``ForwardOptions.check_forward``. diffusers *rounds* a bad frame count or size with a
    warning; ppdit refuses instead, so the video you get is the one you asked for."""
    t, s = vae_factors
    patch = transformer_config.get("patch_size", (1, 2, 2))
    if spec.text_encoder not in TEXT_ENCODER_PLACES:
        raise ValueError(f"text_encoder={spec.text_encoder!r} is not one of "
                         f"{TEXT_ENCODER_PLACES}")
    if spec.timeout_s is not None and spec.timeout_s <= 0:
        raise ValueError(f"timeout={spec.timeout_s} must be > 0 seconds")
    if spec.num_steps < 1:
        raise ValueError(f"steps={spec.num_steps} must be >= 1")
    if spec.num_frames < 1 or (spec.num_frames - 1) % t:
        raise ValueError(f"frames={spec.num_frames} must be {t}k + 1 (1, {t + 1}, {2 * t + 1}, "
                         f"...): the Wan VAE turns each latent frame after the first into {t}")
    for name, size in (("height", spec.height), ("width", spec.width)):
        if size < 1 or size % (s * patch[1]):
            raise ValueError(f"{name}={size} must be a positive multiple of {s * patch[1]} "
                             f"(VAE factor {s} x patch {patch[1]})")
    latent_rows = spec.height // s
    if not 1 <= spec.vae_ranks <= max(1, latent_rows):
        raise ValueError(f"vae_ranks={spec.vae_ranks} must lie in 1..{latent_rows}: the decode "
                         f"splits the latent's {latent_rows} rows (height {spec.height} / VAE "
                         f"factor {s}) and each rank needs at least one")
