"""The tiny pipeline folders the prompt -> video tests share (``tests/*/test_t2v.py``): the
request they make, and bf16 on CUDA's tolerance."""

from __future__ import annotations

from ppdit.parallel.layout import Layout, parse_layout
from ppdit.presets import ModelPreset
from ppdit.t2v.spec import GenerateSpec

PROMPT, NEGATIVE = "a red fox jumps over the river", "blurry low quality"
# bf16's unit roundoff is 2^-8 = 3.9e-3; a video value passes 3 steps of a 4-block DiT and the
# VAE: a few units of difference where kernels pick other algorithms (another process, another
# batch shape) stay below 2e-2 of pixel values in [0, 1].
BF16_TOL = {"rtol": 2e-2, "atol": 2e-2}
# Wan 2.2's two experts, in a shape no other test uses: 3 blocks, 2 heads of 16, FFN 80.
MOE_SHAPE = ModelPreset("moe", num_layers=3, num_heads=2, head_dim=16, ffn_dim=80, text_dim=32,
                        text_len=8, freq_dim=256, rope_max_seq_len=1024)


def spec_for(folder, layout: str | Layout = "single", ranks: int | None = None,
             **kw) -> GenerateSpec:
    """A spec with the tests' defaults; ``layout`` as the CLI takes it (parsed here)."""
    kw = {"num_steps": 3, "guidance_scale": 5.0, "seed": 7, **kw}
    if isinstance(layout, str):
        layout = parse_layout(layout, ranks)
    return GenerateSpec(str(folder), PROMPT, NEGATIVE, layout=layout, **kw)


def wan_pipeline(folder, spec: GenerateSpec, *, aligned: bool = True, cache=None,
                 output_type: str = "pt"):
    """diffusers' own ``WanPipeline`` on ``folder``, run as ``spec`` says (its second expert's
    scale too): the video, or with ``output_type="latent"`` the latent. ``aligned``: weights
    copied into aligned memory, as ppdit loads them (``test_t2v.UNALIGNED_TOL`` says why);
    ``cache``: a diffusers cache config for ``enable_cache`` on the transformer."""
    import torch
    from diffusers import WanPipeline

    from ppdit.checkpoint.folder import no_progress_bars
    from ppdit.model import own_memory

    with no_progress_bars():
        pipe = WanPipeline.from_pretrained(folder, local_files_only=True)
    if aligned:
        for module in (pipe.transformer, pipe.transformer_2, pipe.text_encoder, pipe.vae):
            if module is not None:
                own_memory(module)
    if cache is not None:
        pipe.transformer.enable_cache(cache)
    pipe.set_progress_bar_config(disable=True)
    extra = {} if spec.guidance_scale_2 is None else {"guidance_scale_2": spec.guidance_scale_2}
    return pipe(spec.prompt, negative_prompt=spec.negative_prompt,
                num_inference_steps=spec.num_steps, num_frames=spec.num_frames,
                height=spec.height, width=spec.width, guidance_scale=spec.guidance_scale,
                generator=torch.Generator().manual_seed(spec.seed), output_type=output_type,
                **extra).frames
