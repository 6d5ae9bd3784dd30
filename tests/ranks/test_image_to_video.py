"""Wan 2.2's image-conditioned variants from tiny random folders, against diffusers and one
device (bitwise, or within their axis' tolerance: ring's merged blocks, TP's split sums,
Ulysses' token slices):

* TI2V (a timestep per token, 48 latent channels, the 4x16x16 VAE): text to video equal to
  ``WanPipeline(expand_timesteps=True)``, image to video to ``WanImageToVideoPipeline``; its
  folder's shape is one no other test uses: 3 blocks of 6 heads (uneven under Ulysses 4);
* I2V-A14B (two experts reading the image's latent video and mask beside the noise: 36
  channels in, 16 out): equal to ``WanImageToVideoPipeline``;
* Wan 2.1 I2V (the same, one transformer whose cross-attention also reads the picture's CLIP
  tokens, whole on every rank, their projections split by heads under TP): equal to
  ``WanImageToVideoPipeline``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from ppdit.checkpoint.tiny import build_tiny_pipeline
from ppdit.parallel.layout import parse_layout
from ppdit.parallel.sequence.ring import RING_TOL
from ppdit.parallel.sequence.ulysses import SP_TOL
from ppdit.parallel.tensor.parallelize import TP_TOL
from ppdit.t2v.generate import encode, generate, generate_latent, prepare
from ppdit.t2v.layouts import plan_for, run_layout
from tests.support.pipelines import MOE_SHAPE, spec_for, wan_pipeline

SIZE = {"num_frames": 9, "height": 32, "width": 48}  # 3 latent frames of 4 x 6: 18 tokens


@pytest.fixture(scope="module")
def ti2v(tmp_path_factory):
    """A tiny TI2V folder and a picture of the video's size."""
    from PIL import Image

    root = tmp_path_factory.mktemp("ti2v")
    torch.set_num_threads(1)
    folder = build_tiny_pipeline(root / "ti2v", seed=3, preset="tiny-ti2v")
    pixels = np.random.default_rng(0).integers(0, 255, (32, 48, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(root / "first.png")
    return folder, str(root / "first.png")


@pytest.fixture(scope="module")
def i2v(tmp_path_factory, ti2v):
    """A tiny Wan 2.2 I2V folder: two experts switching at 0.875, 36 channels in."""
    root = tmp_path_factory.mktemp("i2v")
    folder = build_tiny_pipeline(root / "i2v", seed=5, boundary_ratio=0.875,
                                 preset=replace(MOE_SHAPE, condition_channels=20))
    return folder, ti2v[1]


I2V = {**SIZE, "num_steps": 6, "guidance_scale_2": 2.0}  # 4 steps of one expert, 2 of the other


@pytest.fixture(scope="module")
def i2v21(tmp_path_factory, ti2v):
    """A tiny Wan 2.1 I2V folder: one transformer, a 2-layer CLIP of width 24 (17 tokens)."""
    root = tmp_path_factory.mktemp("i2v21")
    shape = replace(MOE_SHAPE, name="i2v21", condition_channels=20, image_dim=24)
    return build_tiny_pipeline(root / "i2v21", seed=4, preset=shape), ti2v[1]


def image_pipeline(folder, spec):
    """diffusers' ``WanImageToVideoPipeline`` on the folder, as ``spec`` says, its weights in
    aligned memory as ppdit loads them; the prompts encoded by the folder's own ``WanPipeline``
    (the image pipeline's prompt cleaning needs ``ftfy``, which ppdit does not install)."""
    from diffusers import WanImageToVideoPipeline, WanPipeline
    from diffusers.utils import load_image

    from ppdit.checkpoint.folder import no_progress_bars
    from ppdit.model import own_memory

    with no_progress_bars():
        pipe = WanImageToVideoPipeline.from_pretrained(folder, local_files_only=True)
    for module in (pipe.transformer, pipe.text_encoder, pipe.vae, pipe.image_encoder):
        if module is not None:
            own_memory(module)
    pipe.set_progress_bar_config(disable=True)
    text = WanPipeline(**{k: v for k, v in pipe.components.items()
                          if k in ("tokenizer", "text_encoder", "transformer", "vae", "scheduler")})
    with torch.no_grad():
        prompt, negative = text.encode_prompt(spec.prompt, spec.negative_prompt, True,
                                              device="cpu", max_sequence_length=512)

    extra = {} if spec.guidance_scale_2 is None else {"guidance_scale_2": spec.guidance_scale_2}

    def run(output_type: str):
        return pipe(image=load_image(spec.image), prompt_embeds=prompt, **extra,
                    negative_prompt_embeds=negative, num_inference_steps=spec.num_steps,
                    num_frames=spec.num_frames, height=spec.height, width=spec.width,
                    guidance_scale=spec.guidance_scale, output_type=output_type,
                    generator=torch.Generator().manual_seed(spec.seed)).frames
    return run("latent"), run("pt")


def test_text_to_video_equals_wan_pipeline_bit_for_bit(ti2v):
    """Every token gets its own timestep (all the same without an image), as diffusers runs
    it: the latent and the video, bit for bit."""
    folder, _ = ti2v
    spec = spec_for(folder, **SIZE)
    ours = generate(spec)
    assert torch.equal(ours.latent, wan_pipeline(folder, spec, output_type="latent"))
    assert torch.equal(ours.video, wan_pipeline(folder, spec))


def test_image_to_video_equals_the_image_pipeline_bit_for_bit(ti2v):
    """The picture's latent is the first frame, at t = 0, while the rest denoise."""
    folder, image = ti2v
    spec = spec_for(folder, image=image, **SIZE)
    ours = generate(spec)
    latent, video = image_pipeline(folder, spec)
    assert torch.equal(ours.latent, latent) and torch.equal(ours.video, video)


@pytest.mark.parametrize("variant", ["i2v", "i2v21"])
def test_i2v_equals_the_image_pipeline_bit_for_bit(variant, request):
    """Each expert reads the image's latent video and mask beside the noise (Wan 2.1: and the
    picture's CLIP tokens in its cross-attention)."""
    folder, image = request.getfixturevalue(variant)
    spec = spec_for(folder, image=image, **(I2V if variant == "i2v" else SIZE))
    ours = generate(spec)
    latent, video = image_pipeline(folder, spec)
    assert torch.equal(ours.latent, latent) and torch.equal(ours.video, video)


@pytest.fixture(scope="module")
def references(ti2v, i2v, i2v21):
    """One device's latent of each mode: TI2V text only, TI2V with the image, I2V (2.2, 2.1)."""
    out = {}
    for mode, (folder, image), size in (("text", ti2v, SIZE), ("image", ti2v, SIZE),
                                        ("i2v", i2v, I2V), ("i2v21", i2v21, SIZE)):
        spec = spec_for(folder, image=None if mode == "text" else image, **size)
        embeds = encode(spec)
        if spec.image is not None:
            embeds = prepare_image(spec, embeds)
        out[mode] = (spec, embeds, generate_latent(spec, embeds))
    return out


def prepare_image(spec, embeds):
    """The prompts with the picture's latent, as ``generate`` adds it."""
    from ppdit.checkpoint.folder import conditioning, load_folder
    from ppdit.t2v.image import encode_condition

    parts = load_folder(spec.checkpoint, parts=("vae", "image_encoder", "image_processor")
                        if "i2v21" in str(spec.checkpoint) else ("vae",))
    return replace(embeds, **encode_condition(parts, spec, conditioning(spec.checkpoint), embeds))


LAYOUTS = [("step", 2), ("layer", 2), ("cfg", 2), ("ulysses=2", 2), ("ring", 2), ("tp", 2),
           ("ulysses=4", 4), ("cfg=2,ulysses=2", 4)]


@pytest.mark.parametrize(("mode", "layout", "ranks"), [
    *((m, lay, n) for m in ("text", "image") for lay, n in LAYOUTS),
    *(("i2v", lay, n) for lay, n in [("step", 2), ("cfg", 2), ("ulysses=2", 2), ("tp", 2),
                                     ("step=2,ulysses=2", 4)]),
    *(("i2v21", lay, n) for lay, n in [("step", 2), ("layer", 2), ("cfg", 2), ("ulysses=2", 2),
                                       ("ring", 2), ("tp", 2)])])
def test_layouts_equal_one_device(pools, references, mode, layout, ranks):
    """Each layout's latent against one device's: the per-token timesteps sharded with their
    tokens (Ulysses, ring), held whole where the tokens are (layer, TP, step, CFG)."""
    spec, embeds, reference = references[mode]
    spec = replace(spec, layout=parse_layout(layout, ranks))
    out = run_layout(plan_for(spec, reference.shape, embeds), pool=pools(ranks))
    got = embeds.finish(out.latent)
    reference = embeds.finish(reference)
    mesh = spec.layout
    tol = (RING_TOL if mesh.ring > 1 else SP_TOL if mesh.ulysses > 1 else
           TP_TOL if mesh.tp > 1 else None)
    if tol is None:
        assert torch.equal(got, reference)
    else:
        torch.testing.assert_close(got, reference, **tol)


def test_a_picture_that_does_not_fit_is_refused_in_one_line(ti2v, i2v, i2v21, tmp_path,
                                                            folders):
    """Not a picture, another size, a folder that does not condition on one, or none for one
    that needs it: refused before anything loads, naming the file and the rule."""
    folder, image = ti2v
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"not a picture")
    cases = [(spec_for(folder, image=str(junk), **SIZE), "is not a readable picture"),
             (spec_for(folder, image=image, num_frames=9, height=32, width=32), "48x32"),
             (spec_for(folder, image=str(tmp_path / "none.png"), **SIZE), "is not a file"),
             (spec_for(folders["unipc"], image=image), "text-to-video folder"),
             (spec_for(i2v[0], **SIZE), "give it the first frame")]
    for spec, words in cases:
        with pytest.raises(ValueError, match=words) as err:
            prepare(spec)
        assert "\n" not in str(err.value)
