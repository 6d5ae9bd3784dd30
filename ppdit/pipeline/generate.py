"""Prompt -> video on one device (the reference every layout must equal), and the VAE decode.

``generate(spec)``: load the folder, encode the prompts (``encode.py``), draw the noise as
diffusers does, denoise with the folder's scheduler (``denoise.py``), decode with the fp32 VAE.
``generate_layout(spec)`` does the same with the denoising spread over ranks (``ranks.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ppdit.model import torch_dtype
from ppdit.pipeline.denoise import denoise, initial_state, make_denoiser
from ppdit.pipeline.encode import PromptEmbeds, encode_prompts, text_length
from ppdit.pipeline.load import WanFolder, check_folder, load_folder
from ppdit.pipeline.spec import GenerateSpec, check_spec, latent_shape
from ppdit.runtime.device import decide_placement
from ppdit.runtime.trace import Trace, Tracer, merge


@dataclass
class Generated:
    """A generated video and how it was made."""

    spec: GenerateSpec
    latent: torch.Tensor  # (1, C, F', H', W') final latent, fp32
    video: torch.Tensor | None  # (1, F, 3, H, W) in [0, 1], WanPipeline's output_type="pt"
    trace: Trace | None = None
    handoff_bytes: dict[str, int] = field(default_factory=dict)  # step split: what one carries


def validate(spec: GenerateSpec) -> WanFolder:
    """Check the folder and the request against each other before loading weights."""
    folder = WanFolder(check_folder(spec.checkpoint))
    check_spec(spec, folder.vae_factors, folder.transformer_config())
    return folder


def encode(spec: GenerateSpec) -> PromptEmbeds:
    """Load the tokenizer and text encoder, encode, and let the encoder go (see ``encode.py``
    for why this runs once, here, rather than on every rank)."""
    parts = load_folder(spec.checkpoint, dtype=spec.dtype, parts=("tokenizer", "text_encoder"))
    length = text_length(parts.tokenizer, spec.max_sequence_length)
    return encode_prompts(parts.tokenizer, parts.text_encoder, spec.prompt,
                          spec.negative_prompt, spec.guidance_scale, torch_dtype(spec.dtype),
                          length)


def generate_latent(spec: GenerateSpec, embeds: PromptEmbeds, *,
                    device: str | torch.device = "cpu",
                    on_step: Callable[[int], None] | None = None,
                    tracer: Tracer | None = None) -> torch.Tensor:
    """All steps on one device: the single-device reference, final latent (fp32).
    ``tracer`` (optional) records a compute span per step."""
    folder = validate(spec)
    parts = load_folder(folder.path, dtype=spec.dtype, device=device,
                        parts=("transformer", "scheduler"))
    den = make_denoiser(parts.transformer, parts.scheduler, spec.num_steps, spec.guidance_scale,
                        solver=spec.solver)
    shape = latent_shape(spec, folder.vae_factors, parts.transformer.config.in_channels)
    state = initial_state(den, spec.seed, shape)
    span = None if tracer is None else (lambda i: tracer.span("compute", f"step {i}", step=i))
    return denoise(den, state, _on(embeds, device), range(spec.num_steps), span=span,
                   on_step=on_step).latent


def _on(embeds: PromptEmbeds, device) -> PromptEmbeds:
    return PromptEmbeds(embeds.text.to(device),
                        None if embeds.negative is None else embeds.negative.to(device))


@torch.no_grad()
def decode(vae, latent: torch.Tensor) -> torch.Tensor:
    """Latent -> video (1, F, 3, H, W) in [0, 1]: un-normalise with the VAE's latents_mean /
    latents_std, decode in fp32, post-process as ``WanPipeline(output_type="pt")``."""
    from diffusers.video_processor import VideoProcessor

    z = vae.config.z_dim
    latent = latent.to(next(vae.parameters()).device, vae.dtype)
    mean = torch.tensor(vae.config.latents_mean).view(1, z, 1, 1, 1).to(latent.device,
                                                                         latent.dtype)
    inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z, 1, 1, 1).to(latent.device,
                                                                                 latent.dtype)
    video = vae.decode(latent / inv_std + mean, return_dict=False)[0]
    processor = VideoProcessor(vae_scale_factor=vae.config.scale_factor_spatial)
    return processor.postprocess_video(video, output_type="pt")


def generate(spec: GenerateSpec, *, decode_video: bool = True,
             on_step: Callable[[int], None] | None = None, device: str | None = None,
             **launch_kwargs) -> Generated | None:
    """Prompt -> video with ``spec.layout`` (``single`` in this process, others on ranks).
    ``device`` ("cpu", "cuda", "auto"; default ``$PPDIT_DEVICE``) as for every launch.
    ``None`` on torchrun ranks other than 0."""
    validate(spec)
    embeds = encode(spec)
    if spec.layout == "single":
        place = decide_placement(1, device=device).for_rank(0)
        tracer = Tracer(0, place)
        latent = generate_latent(spec, embeds, device=place.device, on_step=on_step,
                                 tracer=tracer).cpu()
        trace, handoff = merge([tracer.finish()]), {}
    else:
        from ppdit.pipeline.ranks import run_layout

        out = run_layout(spec, embeds, on_step=on_step, device=device, **launch_kwargs)
        if out is None:
            return None
        latent, trace, handoff = out.latent, out.trace, out.handoff_bytes
    video = None
    if decode_video:
        video = decode(load_folder(spec.checkpoint, parts=("vae",)).vae, latent)
    return Generated(spec, latent, video, trace, handoff)


__all__ = ["Generated", "decode", "encode", "generate", "generate_latent", "validate"]
