"""Latent -> video, the one way: ``WanPipeline``'s arithmetic, step for step.

``denormalize`` turns the DiT's latent into what the VAE reads (divide by the inverse std, add
the mean: written as ``WanPipeline`` writes it, so the pixels are its bits; ``z * std + mean``
differs in the last bit). Every decode in ppdit goes through it: the one-device ``decode``
below (whole, or streamed a latent frame at a time through Wan's causal cache), the bring-up
controller's streaming decode, the patch-parallel decode over ranks, the toy's scoring. It is
elementwise, so it commutes with chunking and with a split by rows. ``postprocess`` is
``WanPipeline(output_type="pt")``'s: (1, 3, F, H, W) in [-1, 1] -> (1, F, 3, H, W) in [0, 1].
"""

from __future__ import annotations

import torch

from ppdit.vae.streaming import decode_full, decode_streaming


def denormalize(latent: torch.Tensor, config) -> torch.Tensor:
    """The DiT's latent as the VAE reads it (``config``: the VAE's, with ``latents_mean`` and
    ``latents_std``), in the latent's dtype and on its device."""
    z = config.z_dim
    mean = torch.tensor(config.latents_mean).view(1, z, 1, 1, 1).to(latent.device, latent.dtype)
    inv_std = 1.0 / torch.tensor(config.latents_std).view(1, z, 1, 1, 1).to(latent.device,
                                                                            latent.dtype)
    return latent / inv_std + mean


@torch.no_grad()
def decode(vae, latent: torch.Tensor, *, streaming: bool = False) -> torch.Tensor:
    """Latent -> video (1, F, 3, H, W) in [0, 1]: denormalize, decode in the VAE's dtype (Wan:
    fp32) on its device, post-process. ``streaming`` decodes one latent frame at a time with
    Wan's causal cache (``ppdit.vae.streaming``): the same pixels, a peak of one frame's
    activations instead of the whole video's (a 480p x 81-frame decode is 275 TFLOP and tens
    of GB of activations at once)."""
    latent = denormalize(latent.to(next(vae.parameters()).device, vae.dtype), vae.config)
    video = decode_streaming(vae, latent) if streaming else decode_full(vae, latent)
    return postprocess(video, vae.config)


def postprocess(video: torch.Tensor, config) -> torch.Tensor:
    """The decoder's (1, 3, F, H, W) in [-1, 1] -> (1, F, 3, H, W) in [0, 1] on the CPU."""
    from diffusers.video_processor import VideoProcessor

    processor = VideoProcessor(vae_scale_factor=config.scale_factor_spatial)
    return processor.postprocess_video(video, output_type="pt").cpu()
