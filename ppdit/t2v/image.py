"""The image of image-to-video: read and checked before any rank starts, encoded by the VAE
as ``WanImageToVideoPipeline`` encodes it (same arithmetic, same bits), in one of two ways:

* **first frame** (Wan 2.2 TI2V, ``expand_timesteps``): the picture's latent becomes the
  video's first latent frame, which every step reads at t = 0 (``Conditioning.model_input``);
* **concat** (Wan 2.2 I2V-A14B): the picture followed by black frames is encoded as a whole
  video, and that latent video with a mask of the known frames (4 + 16 channels) is read beside
  the noise at every step: the DiT's input has 36 channels, its output 16. Wan 2.1 I2V also
  gives its cross-attention the picture's CLIP tokens (257 of them for ViT-H), in front of the
  prompt's: they travel with the prompt, whole on every rank (never split by tokens).

The picture passes diffusers' ``VideoProcessor``: ppdit refuses another size than the video's
instead of resizing it silently.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ppdit.checkpoint.folder import conditioning


def read_image(path: str, height: int, width: int):
    """The picture at ``path`` as RGB (diffusers' ``load_image``), or a ``ValueError`` in one
    line: a missing or damaged file, or a size other than the video's."""
    from diffusers.utils import load_image
    from PIL import UnidentifiedImageError

    if not Path(path).is_file():
        raise ValueError(f"image={path!r} is not a file")
    try:
        image = load_image(path)
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise ValueError(f"image={path!r} is not a readable picture ({type(e).__name__}: "
                         f"{str(e).splitlines()[0][:120]})") from None
    if image.size != (width, height):
        raise ValueError(f"image={path!r} is {image.size[0]}x{image.size[1]} but the video is "
                         f"{width}x{height}: resize the picture, or pass --width "
                         f"{image.size[0]} --height {image.size[1]} (multiples of the VAE's)")
    return image


def check_image(spec, folder: Path) -> None:
    """An image for a folder that conditions on one, a readable one; an I2V folder needs it."""
    mode = conditioning(folder)
    if spec.image is None and mode == "concat":
        raise ValueError(f"{folder} is an image-to-video folder (WanImageToVideoPipeline): "
                         "give it the first frame, --image PATH")
    if spec.image is None:
        return
    if mode is None:
        raise ValueError(f"image={spec.image!r}: {folder} is a text-to-video folder; an image "
                         "conditions Wan 2.2 TI2V (expand_timesteps) and I2V folders")
    read_image(spec.image, spec.height, spec.width)


def encode_condition(parts, spec, mode: str, prompts) -> dict:
    """The ``Conditioning`` fields of ``spec.image`` for the folder's ``mode``; ``parts``: the
    folder's VAE (and CLIP, for Wan 2.1 I2V), ``prompts``: the encoded ``Conditioning``."""
    if mode == "first frame":
        return {"image": encode_image(parts.vae, spec.image, spec.height, spec.width)}
    out = {"channels": encode_video(parts.vae, spec.image, spec.height, spec.width,
                                    spec.num_frames)}
    if parts.image_encoder is not None:
        tokens = clip_tokens(parts, read_image(spec.image, spec.height, spec.width))
        out |= {k: None if t is None else with_image_tokens(t, tokens)
                for k, t in (("text", prompts.text), ("null_text", prompts.null_text))}
    return out


@torch.no_grad()
def clip_tokens(parts, image) -> torch.Tensor:
    """(1, N, image_dim): the CLIP vision model's second-to-last hidden states of the picture,
    as ``WanImageToVideoPipeline.encode_image`` takes them."""
    device = next(parts.image_encoder.parameters()).device
    pixels = parts.image_processor(images=image, return_tensors="pt").to(device)
    return parts.image_encoder(**pixels, output_hidden_states=True).hidden_states[-2].cpu()


def with_image_tokens(text: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The prompt with the CLIP tokens in front, zero-padded to the prompt's width and cast
    to its dtype (the transformer's, as diffusers casts them): what ``model.condition`` cuts."""
    pad = text.shape[2] - tokens.shape[2]
    tokens = torch.nn.functional.pad(tokens.to(text.dtype), (0, pad))
    return torch.cat([tokens.expand(text.shape[0], -1, -1), text], dim=1)


@torch.no_grad()
def encode_image(vae, path: str, height: int, width: int, frames: int = 1) -> torch.Tensor:
    """(1, C, F', H', W'): the picture (then ``frames - 1`` black frames) as the VAE encodes
    it, normalised as the DiT's latents are, fp32."""
    from diffusers.video_processor import VideoProcessor

    processor = VideoProcessor(vae_scale_factor=vae.config.scale_factor_spatial)
    param = next(vae.parameters())
    pixels = processor.preprocess(read_image(path, height, width), height=height, width=width)
    first = pixels.to(param.device, torch.float32).unsqueeze(2)
    video = torch.cat([first, first.new_zeros(1, 3, frames - 1, height, width)], dim=2)
    latent = vae.encode(video.to(param.dtype)).latent_dist.mode().to(torch.float32)
    z = vae.config.z_dim
    mean = torch.tensor(vae.config.latents_mean).view(1, z, 1, 1, 1).to(latent.device)
    inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z, 1, 1, 1).to(latent.device)
    return ((latent - mean) * inv_std).cpu()


def encode_video(vae, path: str, height: int, width: int, frames: int) -> torch.Tensor:
    """(1, 4 + C, F', H', W'): which pixel frames are known (the first), 4 to a latent frame
    as the VAE packs time, beside the latent of the picture followed by black frames."""
    latent = encode_image(vae, path, height, width, frames)
    t, (_, _, f, h, w) = vae.config.scale_factor_temporal, latent.shape
    known = torch.zeros(1, 1, t + frames - 1, h, w)
    known[:, :, :t] = 1  # the first latent frame is the first pixel frame, repeated t times
    return torch.cat([known.view(1, f, t, h, w).transpose(1, 2), latent], dim=1)
