"""``ppdit plan``: what a layout needs per GPU and how fast it can be, before anything runs.

A layout (``parallel.layout``, e.g. ``cfg=2,ulysses=4,fsdp``), checked by the rules ``ppdit
generate`` applies, is bounded by ``hardware.predict`` next to one GPU: the weights per GPU, a
step's lower bound, the bytes on the link. That table counts weights only; ``memory_report``
adds the whole per-GPU memory (``memory_model``: activations, handoff buffers, solver state,
prompts, the VAE's decode) for the real configurations, and whether the layout fits the GPU."""

from __future__ import annotations

from ppdit.analysis.hardware import GPUS, Prediction, format_predictions, predict
from ppdit.analysis.memory_model import MemoryBreakdown, rank_memory_model
from ppdit.analysis.roofline import latent_for
from ppdit.parallel.layout import Layout, parse_layout
from ppdit.presets import get_preset


def plan_rows(model, gpu: str, layout: str | Layout, link: str | None = None,
              latent_shape: tuple[int, ...] | None = None, dtype: str = "bf16",
              num_steps: int = 50, cfg: bool = True) -> list[Prediction]:
    """One GPU, then the layout over each link the GPU offers (or ``link``). ``model``: a
    preset's name or a ``ModelPreset``; ``num_steps`` and ``cfg`` (guidance on) as the request
    would run (a step split needs a step per stage, CFG-parallel a second half)."""
    if gpu not in GPUS:
        raise ValueError(f"gpu={gpu!r} is not one of {tuple(GPUS)}")
    hw = parse_layout(layout) if isinstance(layout, str) else layout
    kw = dict(latent_shape=latent_shape, dtype=dtype, num_steps=num_steps, cfg=cfg)
    links = [link] if link else list(GPUS[gpu].links)
    return [predict(model, gpu, **kw), *(predict(model, gpu, hw, link=lk, **kw) for lk in links)]


# the real configurations the memory table covers: (model, resolution, frames); TI2V at its
# own 720p x 121 frames (24 fps), where 4 x 24 GB GPUs are reported running out
REAL_CONFIGS = (*((m, res, 81) for m in ("wan2.1-1.3b", "wan2.1-14b", "wan2.2-a14b")
                  for res in ("480p", "720p")), ("wan2.2-ti2v-5b", "720p", 121))
_COLUMNS = ("weights", "gathered", "activations", "handoff", "solver", "text_embeddings",
            "vae_peak", "total")
_VERDICT = {True: "fits", False: "does NOT fit"}


def memory_rows(layout: str, **kwargs) -> dict[tuple[str, str], MemoryBreakdown | str]:
    """``memory_model`` for each real configuration (or why the layout cannot run it)."""
    hw, out = parse_layout(layout), {}
    for model, res, frames in REAL_CONFIGS:
        shape = latent_for(res, frames, vae=get_preset(model).vae)
        try:
            out[(model, res)] = rank_memory_model(model, hw, latent_shape=shape, **kwargs)
        except ValueError as e:
            out[(model, res)] = str(e)
    return out


def memory_report(layout: str, gpu: str, model: str = "wan2.1-14b", **kwargs) -> str:
    """Per-GPU bytes of ``layout`` for every real configuration, and the verdict for ``model``
    at 480p: "this layout needs N GB per GPU; your GPUs (gpu) have M GB"."""
    mem = GPUS[gpu].mem_bytes
    head = f"{'model':<15}{'video':<6}" + "".join(f"{c[:8]:>9}" for c in _COLUMNS) + "  GB/GPU"
    lines = [f"memory per GPU of {parse_layout(layout).name} (bf16, CFG batched, Euler, one "
             "request; total = weights + max(denoising, VAE decode)):", head]
    rows = memory_rows(layout, **kwargs)
    for (name, res), m in rows.items():
        cells = (f"  cannot run: {m}" if isinstance(m, str) else "".join(
            f"{getattr(m, c) / 1e9:>9.2f}" for c in _COLUMNS) + f"  {_VERDICT[m.total <= mem]}")
        lines.append(f"{name:<15}{res:<6}{cells}")
    mine = rows.get((model, "480p"))
    if isinstance(mine, MemoryBreakdown):
        lines.append(f"{model} at 480p: this layout needs {mine.total / 1e9:.1f} GB per GPU; "
                     f"your GPUs ({gpu}) have {mem / 1e9:.0f} GB: {_VERDICT[mine.total <= mem]}")
    lines.append("(umT5-XXL's weights, "
                 f"{rank_memory_model(model, text_encoder=True).text_encoder / 1e9:.1f} GB, "
                 "come on top only if the text encoder stays on the GPU)")
    return "\n".join(lines)


def plan_report(rows: list[Prediction], layout: str | None = None) -> str:
    """The table and one sentence per layout row: does it fit, and at what speed; with
    ``layout``, the whole per-GPU memory of the real configurations below."""
    one, lines = rows[0], [format_predictions(rows), ""]
    mem = GPUS[one.gpu].mem_bytes / 1e9
    for r in rows[1:]:
        lines.append(f"{r.layout} over {r.link}: needs {r.weights_gb:.1f} GB of weights per GPU "
                     f"({_VERDICT[r.fits]} in the {one.gpu}'s {mem:.0f} GB); "
                     f"a step >= {r.step_s:.2f} s, "
                     f"{one.step_s / r.step_s:.2f}x one GPU's {one.step_s:.2f} s")
    if layout is not None:
        lines += ["", memory_report(layout, one.gpu, one.model)]
    return "\n".join(lines)
