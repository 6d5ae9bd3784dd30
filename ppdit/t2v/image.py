"""Wan 2.2 TI2V's image: read and checked before any rank starts, encoded by the VAE as
``WanImageToVideoPipeline(expand_timesteps=True)`` encodes it (same arithmetic, same bits).

The image becomes the video's first latent frame: resized to the video's size by diffusers'
``VideoProcessor`` (ppdit refuses another size instead of resizing it silently), encoded to
the mode of the VAE's posterior, normalised as the DiT's latents are. Every step then reads it
in place of the first frame, at t = 0 (``sampler.Conditioning.model_input``).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ppdit.checkpoint.folder import read_json


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
    """An image only for a folder that conditions on one (Wan 2.2 TI2V), and a readable one."""
    if spec.image is None:
        return
    if not read_json(Path(folder) / "model_index.json").get("expand_timesteps"):
        raise ValueError(f"image={spec.image!r}: {folder} is a text-to-video folder; an image "
                         "conditions a Wan 2.2 TI2V folder (model_index.json: expand_timesteps)")
    read_image(spec.image, spec.height, spec.width)


@torch.no_grad()
def encode_image(vae, path: str, height: int, width: int) -> torch.Tensor:
    """(1, C, 1, H', W'): the picture's latent, normalised as the DiT's latents are, fp32."""
    from diffusers.video_processor import VideoProcessor

    processor = VideoProcessor(vae_scale_factor=vae.config.scale_factor_spatial)
    param = next(vae.parameters())
    pixels = processor.preprocess(read_image(path, height, width), height=height, width=width)
    frame = pixels.to(param.device, torch.float32).unsqueeze(2).to(param.dtype)
    latent = vae.encode(frame).latent_dist.mode().to(torch.float32)
    z = vae.config.z_dim
    mean = torch.tensor(vae.config.latents_mean).view(1, z, 1, 1, 1).to(latent.device)
    inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z, 1, 1, 1).to(latent.device)
    return ((latent - mean) * inv_std).cpu()
