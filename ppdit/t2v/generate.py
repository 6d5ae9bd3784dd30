"""Prompt -> video, read the way ``WanPipeline.__call__`` reads: check the request, encode the
prompts, draw the noise, denoise (on one device, or on the spec's layout), decode.

``prepare`` checks the request and builds its plan once (``t2v.layouts.plan_for``); the plan runs
in this process (every degree 1: ``generate_latent``, the reference every layout must equal) or
on its layout's ranks, through the same runner (``ppdit.parallel.runner``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from ppdit._spawn_entry import in_torchrun
from ppdit.checkpoint.folder import WanFolder, check_folder, conditioning, load_folder
from ppdit.checkpoint.source import ModelSource
from ppdit.checkpoint.text import encode_prompts, text_length
from ppdit.model import torch_dtype
from ppdit.parallel.layout import Layout
from ppdit.parallel.runner import LayoutPlan, loop_plan, run_local
from ppdit.parallel.share import check_plans
from ppdit.runtime.comm.wire import START_S
from ppdit.runtime.device import cpu_share, process_placement
from ppdit.runtime.observe.timing import timed
from ppdit.runtime.observe.trace import Trace, Tracer, merge
from ppdit.sampler import Conditioning
from ppdit.t2v.image import check_image, encode_condition
from ppdit.t2v.layouts import REQUEST_ID, plan_for, run_layout
from ppdit.t2v.spec import GenerateSpec, check_spec, latent_shape
from ppdit.vae.decode import decode, denormalize, postprocess
from ppdit.vae.presets import build_vae


@dataclass
class Generated:
    """A generated video and how it was made."""

    spec: GenerateSpec
    latent: torch.Tensor  # (1, C, F', H', W') final latent, fp32
    video: torch.Tensor | None  # (1, F, 3, H, W) in [0, 1], WanPipeline's output_type="pt"
    trace: Trace | None = None
    handoff_bytes: dict[str, int] = field(default_factory=dict)  # step split: what one carries
    text: TextEncoding | None = None  # where the prompts were encoded, and the cost
    vae: VaeCost | None = None  # a split decode's ranks and per-rank cost (None: one device)


@dataclass(frozen=True)
class Prepared:
    """A request checked against its folder, and the plan that runs it (prompts still to
    come): what ``prepare`` returns and ``generate`` runs."""

    spec: GenerateSpec
    plan: LayoutPlan


def prepare(spec: GenerateSpec | Prepared, *, device: str | None = None) -> Prepared:
    """Check the folder, the request, its layout and whether each rank's weights fit its
    ``device`` (``parallel.share``) before loading weights, once, and build the plan
    (``ValueError`` naming the rule it breaks)."""
    if isinstance(spec, Prepared):
        return spec
    folder = WanFolder(check_folder(spec.checkpoint))
    check_spec(spec, folder.vae_factors, folder.transformer_config())
    check_image(spec, folder.path)
    plan = plan_for(spec, shape_of(spec, folder))
    loop_plan(plan)  # the pipeline loop's own rules too
    check_plans({"generate": plan}, spec.ranks, {"device": device})
    if spec.vae_ranks > 1:  # a split decode that cannot work, refused before the denoising
        from ppdit.parallel.vae_patch.decode import check_split

        check_split(build_vae(checkpoint=spec.checkpoint, device="meta").decoder,
                    shape_of(spec, folder)[3], spec.vae_ranks)
    return Prepared(spec, plan)


def shape_of(spec: GenerateSpec, folder: WanFolder) -> tuple[int, ...]:
    """The latent shape of ``spec`` with this folder's VAE and transformer."""
    cfg = folder.transformer_config()  # the latent: what the DiT predicts (I2V reads more)
    return latent_shape(spec, folder.vae_factors, cfg.get("out_channels") or cfg["in_channels"])


@dataclass(frozen=True)
class TextEncoding:
    """The prompts' embeddings, and what encoding them cost: where, how many bytes of encoder
    weights sat there, how long it took."""

    prompts: Conditioning
    device: str
    weight_bytes: int
    seconds: float

    def sentence(self) -> str:
        """"text encoder: 11.4 GB on cuda:0 for 2.1 s, freed before the DiT loads"."""
        return (f"text encoder: {self.weight_bytes / 1e9:.3g} GB of weights on {self.device} "
                f"for {self.seconds:.1f} s, freed before the DiT loads")


def encode_with_cost(spec: GenerateSpec, device: str | torch.device = "cpu") -> TextEncoding:
    """Load the tokenizer and text encoder on ``device``, encode, and let the encoder go
    before the DiT loads (umT5-XXL is 11.4 GB in bf16: it must not sit beside a 14B DiT). The
    embeddings come back on the CPU, from where every rank takes them."""
    with timed() as clock:  # the host's clock: the copy to the CPU waits for the device
        parts = load_folder(spec.checkpoint, dtype=spec.dtype, device=device,
                            parts=("tokenizer", "text_encoder"))
        weights = sum(t.numel() * t.element_size() for t in parts.text_encoder.parameters())
        length = text_length(parts.tokenizer, spec.max_sequence_length)
        out = encode_prompts(parts.tokenizer, parts.text_encoder, spec.prompt,
                             spec.negative_prompt, spec.guidance_scale,
                             torch_dtype(spec.dtype), length).to("cpu")
        del parts
        if torch.device(device).type == "cuda":  # the caching allocator keeps the encoder's
            torch.cuda.empty_cache()
    return TextEncoding(out, str(device), weights, clock.seconds)


def encode(spec: GenerateSpec, device: str | torch.device = "cpu") -> Conditioning:
    """The prompts' embeddings (``encode_with_cost`` without the cost)."""
    return encode_with_cost(spec, device).prompts


def generate_latent(spec: GenerateSpec | Prepared, prompts: Conditioning, *,
                    device: str | torch.device = "cpu",
                    on_step: Callable[[int], None] | None = None,
                    tracer: Tracer | None = None) -> torch.Tensor:
    """All steps on one device, in this process: the single-device reference, final latent
    (fp32), whatever the spec's layout. ``tracer`` (optional) records a compute span a step."""
    plan = replace(prepare(spec).plan, layout=Layout(), prompts=(prompts,))
    return run_local(plan, device, on_step=on_step, tracer=tracer)[REQUEST_ID]


@dataclass(frozen=True)
class VaeCost:
    """Where the decode ran and what it held: one device, or ``ranks`` split by rows."""

    ranks: int
    peak_bytes: list[int]  # per rank, above weights and latent (measured on split decodes)
    seconds: list[float]

    def sentence(self) -> str:
        """"VAE decode: 2 ranks by rows, peak 0.66 / 0.50 MB per rank, 1.2 s"."""
        peaks = " / ".join(f"{p / 1e6:.3g}" for p in self.peak_bytes)
        return (f"VAE decode: {self.ranks} ranks split by rows, peak {peaks} MB of "
                f"activations per rank, {max(self.seconds):.1f} s")


def decode_split(spec: GenerateSpec, latent: torch.Tensor, **launch_kwargs
                 ) -> tuple[torch.Tensor, VaeCost]:
    """``decode`` over ``spec.vae_ranks`` ranks, the latent split by rows
    (``parallel.vae_patch``, the folder's VAE from its ``ModelSource``): equal to the
    one-device decode within ``PATCH_TOL``. A second launch, after the denoising ranks end."""
    from ppdit.parallel.vae_patch.run import PatchPlan, run_patch

    config = build_vae(checkpoint=spec.checkpoint, device="meta").config  # no weights read
    plan = PatchPlan((denormalize(latent.float().cpu(), config).contiguous(),), spec.vae_ranks,
                     ModelSource(folder=spec.checkpoint), gather="first")
    out = run_patch(plan, memory=True, **launch_kwargs)
    return postprocess(out.video, config), VaeCost(spec.vae_ranks, out.run_peaks, out.seconds)


def bounds(timeout_s: float | None) -> dict:
    """The launch's bounds: ``timeout_s`` for the job and every wait inside it, or (None) from
    the work: ``START_S`` until the ranks have timed a step, then as long as the work needs
    (``RankContext.expect``). NCCL's watchdog then never cuts a step split's first handoff at
    720p, and a hang is still named."""
    if timeout_s is None:
        return {"timeout_s": START_S, "pg_timeout_s": START_S, "follow_work": True}
    return {"timeout_s": timeout_s, "pg_timeout_s": timeout_s}


def generate(spec: GenerateSpec | Prepared, *, decode_video: bool = True,
             on_step: Callable[[int], None] | None = None, device: str | None = None,
             streaming_decode: bool = False,
             on_text: Callable[[TextEncoding], None] | None = None,
             **launch_kwargs) -> Generated | None:
    """Prompt -> video on the spec's layout (one device in this process, others on ranks).
    ``device`` ("cpu", "cuda", "auto"; default ``$PPDIT_DEVICE``) as for every launch; the
    text encoder and the VAE run there too (under torchrun, on the local rank's device).
    ``streaming_decode``: see ``decode``. ``on_text`` hears where the prompts were encoded, on
    every rank. ``None`` on torchrun ranks other than 0."""
    prepared = prepare(spec, device=device)
    spec = prepared.spec
    launch_kwargs = {**bounds(spec.timeout_s), **launch_kwargs}
    if spec.vae_ranks > 1 and in_torchrun():
        raise ValueError(f"vae_ranks={spec.vae_ranks}: a split decode launches its own ranks, "
                         "which torchrun's fixed world cannot; run it without torchrun")
    # Encode and decode where the ranks compute (the first GPU with --device cuda; under
    # torchrun, the local rank's): on one core a 480p decode takes hours.
    place = process_placement(device)
    with cpu_share(place):
        text = encode_with_cost(spec, place.device if spec.text_encoder == "device" else "cpu")
    if on_text is not None:
        on_text(text)
    prompts = text.prompts
    if spec.image is not None:  # the image's latent (and CLIP tokens), where the VAE decodes
        clip = ("image_encoder", "image_processor") if prepared.plan.source.spec.image_dim else ()
        parts = load_folder(spec.checkpoint, parts=("vae", *clip), device=place.device)
        with cpu_share(place):
            prompts = replace(prompts, **encode_condition(parts, spec,
                                                          conditioning(spec.checkpoint), prompts))
        del parts
    plan = replace(prepared.plan, prompts=(prompts,))
    if spec.layout.ranks == 1:
        tracer = Tracer(0, place)
        latent = run_local(plan, place.device, on_step=on_step, tracer=tracer)[REQUEST_ID]
        latent, trace, handoff = latent.cpu(), merge([tracer.finish()]), {}
    else:
        out = run_layout(plan, on_step=on_step, device=device, **launch_kwargs)
        if out is None:
            return None
        latent, trace, handoff = out.latent, out.trace, out.handoff_bytes
    latent = prompts.finish(latent)  # an image's latent as the first frame, as decoded
    video, vae_cost = None, None
    if decode_video and spec.vae_ranks > 1:
        video, vae_cost = decode_split(spec, latent, device=device, **launch_kwargs)
    elif decode_video:
        vae = load_folder(spec.checkpoint, parts=("vae",), device=place.device).vae
        with cpu_share(place):
            video = decode(vae, latent, streaming=streaming_decode)
        del vae
        place.empty_cache()
    return Generated(spec, latent, video, trace, handoff, text, vae_cost)
