"""``ppdit plan``: what a layout needs per GPU and how fast it can be, before anything runs.

A composed layout (``t2v.layout``, e.g. ``cfg=2,ulysses=4,fsdp=8``) becomes the roofline's
``hardware.Layout``, and ``hardware.predict`` bounds it for a model and GPU (per GPU: the
weights it holds, the lower bound of a step, the bytes on the link), next to one GPU. The
memory column counts weights only; activations, the text encoder and the VAE come on top
(issue 26's memory model will add them).
"""

from __future__ import annotations

from ppdit.analysis.hardware import GPUS, Layout, Prediction, format_predictions, predict
from ppdit.t2v.layout import parse_layout


def hardware_layout(text: str, ranks: int | None = None) -> Layout:
    """The roofline's view of a composed layout (``ValueError`` naming what it cannot model)."""
    m = parse_layout(text, ranks)
    if m.step > 1 and m.layer > 1:
        raise ValueError(f"layout {m}: step and layer split do not compose")
    split, pp = ("step", m.step) if m.step > 1 else ("layer", m.layer)
    return Layout(tp=m.tp, pp=pp, split=split, ulysses=m.ulysses, ring=m.ring, cfg=m.cfg,
                  fsdp=m.fsdp > 1)


def plan_rows(model: str, gpu: str, layout: str, link: str | None = None,
              latent_shape: tuple[int, ...] | None = None, dtype: str = "bf16"
              ) -> list[Prediction]:
    """One GPU, then the layout over each link the GPU offers (or ``link``)."""
    if gpu not in GPUS:
        raise ValueError(f"gpu={gpu!r} is not one of {tuple(GPUS)}")
    hw = hardware_layout(layout)
    one = predict(model, gpu, latent_shape=latent_shape, dtype=dtype)
    links = [link] if link else list(GPUS[gpu].links)
    return [one, *(predict(model, gpu, hw, link=lk, latent_shape=latent_shape, dtype=dtype)
                   for lk in links)]


def plan_report(rows: list[Prediction]) -> str:
    """The table and one sentence per layout row: does it fit, and at what speed."""
    one, lines = rows[0], [format_predictions(rows), ""]
    mem = GPUS[one.gpu].mem_bytes / 1e9
    for r in rows[1:]:
        verdict = "fits" if r.fits else "does NOT fit"
        lines.append(f"{r.layout} over {r.link}: needs {r.weights_gb:.1f} GB of weights per GPU "
                     f"({verdict} in the {one.gpu}'s {mem:.0f} GB); a step >= {r.step_s:.2f} s, "
                     f"{one.step_s / r.step_s:.2f}x one GPU's {one.step_s:.2f} s")
    return "\n".join(lines)


__all__ = ["hardware_layout", "plan_report", "plan_rows"]
