"""One request alone: which layouts make it faster, on the roofline (lessons 06 and 10).

Two layouts besides TP cut the latency of a single request; ``hardware.predict`` bounds them
like the rest, and the two functions here name them as the lessons do:

* **CFG-parallel**: with classifier-free guidance a step is two forwards of the same model, the
  conditional and the unconditional one. Two ranks (or two TP groups) each run one and exchange
  their predictions: one all-gather of the model output (the latent's size) per step. Each rank
  holds the whole model (or its TP shard).
* **Ulysses SP** (lesson 06): each of P ranks holds S/P tokens and all weights; self-attention
  swaps to a split by heads (H/P heads over all S tokens) with four all-to-alls per block."""

from __future__ import annotations

from dataclasses import replace

from ppdit.analysis.hardware import LAYOUTS, Prediction, predict
from ppdit.parallel.layout import Layout
from ppdit.presets import get_preset


def predict_cfg_parallel(model: str, gpu: str, *, tp: int = 1, link: str | None = None,
                         dtype: str = "bf16",
                         latent_shape: tuple[int, ...] | None = None) -> Prediction:
    """Lower bound per denoising step with the two CFG halves on two ranks (or two TP groups of
    ``tp`` ranks): one forward per rank, plus the all-gather of the 2 predictions per step."""
    out = predict(model, gpu, Layout(tp=tp, cfg=2), link=link, dtype=dtype,
                  latent_shape=latent_shape)
    return replace(out, layout="CFG-parallel" + (f" x TP={tp}" if tp > 1 else ""))


def predict_ulysses(model: str, gpu: str, *, degree: int, link: str | None = None,
                    dtype: str = "bf16", cfg: bool = True,
                    latent_shape: tuple[int, ...] | None = None) -> Prediction:
    """Lower bound per denoising step with Ulysses SP over ``degree`` ranks."""
    out = predict(model, gpu, Layout(ulysses=degree), link=link, dtype=dtype, cfg=cfg,
                  latent_shape=latent_shape)
    return replace(out, layout=f"Ulysses SP={degree}")


def one_request_rows(model: str, gpu: str, link: str) -> list[Prediction]:
    """Every layout of ``LAYOUTS``, CFG-parallel and Ulysses on 2 and 4 GPUs over ``link``, with
    CFG on: the rows to compare for the latency of one request (``latency_s``) against one GPU."""
    rows = [predict(model, gpu), *(predict(model, gpu, layout, link=link)
                                   for layout in LAYOUTS[1:]),
            *(predict_cfg_parallel(model, gpu, tp=tp, link=link) for tp in (1, 2))]
    heads = get_preset(model).num_heads
    rows += [predict_ulysses(model, gpu, degree=d, link=link) for d in (2, 4) if heads % d == 0]
    return rows
