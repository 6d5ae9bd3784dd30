"""One request alone: which layouts make it faster, on the roofline (lessons 07 and 12).

``ppdit.analysis.hardware.predict`` covers one GPU, TP, step-split and layer-split. Two more
layouts cut the latency of a single request, and this module bounds them the same way (per op,
max(FLOPs / peak, bytes / bandwidth), communication not overlapped):

* **CFG-parallel**: with classifier-free guidance a step is two forwards of the same model, the
  conditional and the unconditional one. Two ranks (or two TP groups) each run one and exchange
  their predictions: one all-gather of the model output (the latent's size) per step. Each rank
  holds the whole model (or its TP shard).
* **Ulysses SP** (lesson 12): each of P ranks holds S/P tokens and all weights; self-attention
  swaps to a split by heads with four all-to-alls per block. Every token-wise op, and attention
  (H/P heads over all S tokens), is 1/P of one GPU's work; the text-side projections of the
  cross-attention, which every rank repeats, are under 1% of a 480p forward and are left out.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ppdit.analysis.hardware import GPUS, LINKS, Layout, Prediction, predict
from ppdit.analysis.roofline import DTYPE_BYTES, dtype_name
from ppdit.model import get_preset
from ppdit.parallel.sequence.comms import a2a_bytes_per_layer


def predict_cfg_parallel(model: str, gpu: str, *, tp: int = 1, link: str | None = None,
                         dtype: str = "bf16", latent_shape: tuple[int, ...] | None = None
                         ) -> Prediction:
    """Lower bound per denoising step with the two CFG halves on two ranks (or two TP groups of
    ``tp`` ranks): one forward per rank, plus the all-gather of the 2 predictions per step."""
    one = predict(model, gpu, Layout(tp=tp), link=link, dtype=dtype, cfg=False,
                  latent_shape=latent_shape)
    link = link or GPUS[gpu].links[0]
    shape = tuple(latent_shape or get_preset(model).latent_shape)
    # each rank sends its prediction once (a 2-rank all-gather); a TP rank sends its 1/tp share
    exchange = math.prod(shape) * DTYPE_BYTES[dtype_name(dtype)] / tp
    comm_s = one.comm_s + exchange / LINKS[link]
    step = one.flop_s + one.memory_s + comm_s
    name = "CFG-parallel" + (f" x TP={tp}" if tp > 1 else "")
    return replace(one, layout=name, link=link, gpus=2 * tp, comm_s=comm_s,
                   comm_bytes=one.comm_bytes + exchange, step_s=step, latency_s=step)


def predict_ulysses(model: str, gpu: str, *, degree: int, link: str | None = None,
                    dtype: str = "bf16", cfg: bool = True,
                    latent_shape: tuple[int, ...] | None = None) -> Prediction:
    """Lower bound per denoising step with Ulysses SP over ``degree`` ranks (approximate: see
    the module docstring for the one term left out)."""
    p = get_preset(model)
    if p.num_heads % degree:
        raise ValueError(f"Ulysses over degree={degree} ranks splits whole heads, but "
                         f"{model} has num_heads={p.num_heads} ({p.num_heads} % {degree} != 0)")
    one = predict(model, gpu, dtype=dtype, cfg=cfg, latent_shape=latent_shape)
    link = link or GPUS[gpu].links[0]
    shape = tuple(latent_shape or p.latent_shape)
    forwards = 2 if cfg else 1
    sent = forwards * p.num_layers * a2a_bytes_per_layer(
        batch=shape[0], tokens=p.num_tokens(shape), dim=p.dim, degree=degree,
        bytes_per_element=DTYPE_BYTES[dtype_name(dtype)])
    flop_s, memory_s, comm_s = one.flop_s / degree, one.memory_s / degree, sent / LINKS[link]
    step = flop_s + memory_s + comm_s
    return replace(one, layout=f"Ulysses SP={degree}", link=link, gpus=degree, flop_s=flop_s,
                   memory_s=memory_s, comm_s=comm_s, comm_bytes=sent, step_s=step,
                   latency_s=step)


def one_request_rows(model: str, gpu: str, link: str) -> list[Prediction]:
    """Every layout of lessons 01-12 on 2 and 4 GPUs over ``link``, with CFG on: the rows to
    compare for the latency of one request (``latency_s``) against one GPU."""
    rows = [predict(model, gpu)]
    for layout in (Layout(pp=4, split="step"), Layout(pp=4), Layout(tp=2), Layout(tp=4)):
        rows.append(predict(model, gpu, layout, link=link))
    rows.append(predict_cfg_parallel(model, gpu, link=link))
    rows.append(predict_cfg_parallel(model, gpu, tp=2, link=link))
    heads = get_preset(model).num_heads
    rows += [predict_ulysses(model, gpu, degree=d, link=link) for d in (2, 4) if heads % d == 0]
    return rows


__all__ = ["one_request_rows", "predict_cfg_parallel", "predict_ulysses"]
