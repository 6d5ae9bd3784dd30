"""The roofline's ceilings, GPUs and links (with sources), and the predictions built on them.

``ppdit.analysis.roofline`` counts what the model needs (FLOPs, bytes, message sizes); this
module says what a machine offers and combines the two, op by op, with the simplest honest rule

    time(op) = max(FLOPs / peak FLOP/s, bytes / memory bandwidth)

(Williams et al., "Roofline: an insightful visual performance model", CACM 2009). Summed over a
step's ops this is a *lower bound*: real kernels reach a fraction of either ceiling, launch
overheads are ignored, and so is any overlap of one op's compute with another's memory traffic.
Links likewise: bandwidth per direction, no latency term (``assumptions`` lists every rule)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ppdit.analysis.roofline import (
    DTYPE_BYTES,
    Op,
    block_ops,
    dtype_name,
    layer_handoff_bytes,
    model_ops,
    ring_allreduce_traffic,
    sp_traffic_per_block,
    step_handoff_bytes,
    totals,
    tp_allreduce_bytes,
)
from ppdit.parallel.layout import Layout, check_model
from ppdit.parallel.partition import even_sizes, expert_sizes
from ppdit.presets import ModelPreset, get_preset


@dataclass(frozen=True)
class Hardware:
    """One accelerator's ceilings: dense peak FLOP/s per dtype, memory bandwidth and size."""
    name: str
    bf16_flops: float | None  # dense tensor-core FLOP/s, bf16/fp16 inputs, fp32 accumulation
    fp32_flops: float  # fp32 without tensor cores (PyTorch's default for fp32 matmuls)
    fp8_flops: float | None  # dense fp8 tensor-core FLOP/s; None where there is no fp8
    mem_bw: float  # device memory bandwidth, bytes/s
    mem_bytes: float  # device memory capacity, bytes
    links: tuple[str, ...]  # GPU-to-GPU links it is sold with, fastest first (keys of LINKS)
    source: str

    def peak_flops(self, dtype: str) -> float:
        """Dense peak for ``dtype`` (fp16 runs at the bf16 rate)."""
        name = dtype_name(dtype)
        peak = {"bf16": self.bf16_flops, "fp16": self.bf16_flops, "fp32": self.fp32_flops,
                "fp8": self.fp8_flops}[name]
        if peak is None:
            raise ValueError(f"{self.name} has no {name} peak in the table")
        return peak

    def ridge(self, dtype: str = "bf16") -> float:
        """FLOP/byte where the two ceilings meet: ops left of it are bandwidth-bound."""
        return self.peak_flops(dtype) / self.mem_bw


# Dense numbers: NVIDIA quotes tensor-core peaks "with sparsity" (2:4), twice the dense rate.
GPUS: dict[str, Hardware] = {h.name: h for h in [
    # H100 SXM5 datasheet (https://www.nvidia.com/en-us/data-center/h100/): BF16 tensor 1,979
    # TFLOP/s with sparsity -> 989.4 dense; FP8 3,958 -> 1,979; FP32 67; HBM3 3.35 TB/s, 80 GB.
    Hardware("H100 SXM", 989.4e12, 66.9e12, 1978.9e12, 3.35e12, 80e9,
             ("NVLink 4", "PCIe Gen5 x16"), "NVIDIA H100 datasheet (SXM5)"),
    # H200 SXM (https://www.nvidia.com/en-us/data-center/h200/): the H100's compute with 141 GB
    # of HBM3e at 4.8 TB/s; same NVLink 4 and PCIe Gen5.
    Hardware("H200 SXM", 989.4e12, 66.9e12, 1978.9e12, 4.8e12, 141e9,
             ("NVLink 4", "PCIe Gen5 x16"), "NVIDIA H200 datasheet (SXM)"),
    # RTX 4090: NVIDIA Ada Lovelace GPU architecture whitepaper, appendix table (https://images.
    # nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf): BF16 tensor
    # with FP32 accumulate 165.2 dense (330.4 sparse); FP8 with FP32 accumulate 330.3; FP32
    # 82.6; GDDR6X 1,008 GB/s, 24 GB; PCIe Gen4 x16, no NVLink.
    Hardware("RTX 4090", 165.2e12, 82.6e12, 330.3e12, 1.008e12, 24e9,
             ("PCIe Gen4 x16",), "NVIDIA Ada GPU architecture whitepaper"),
    # RTX A5000 datasheet (https://www.nvidia.com/content/dam/en-zz/Solutions/design-
    # visualization/rtx/nvidia-rtx-a5000-datasheet.pdf): tensor 222.2 TFLOP/s with sparsity ->
    # 111.1 dense (Ampere: no FP8); FP32 27.8; GDDR6 768 GB/s, 24 GB; PCIe Gen4 x16 (its NVLink
    # bridge, 112.5 GB/s both ways, joins only two cards, so it is left out here).
    Hardware("RTX A5000", 111.1e12, 27.8e12, None, 768e9, 24e9,
             ("PCIe Gen4 x16",), "NVIDIA RTX A5000 datasheet"),
]}

# Per-direction link bandwidth, bytes/s.
LINKS: dict[str, float] = {
    # NVLink 4 on H100/H200 SXM: 18 links, 900 GB/s counting both directions -> 450 GB/s each way.
    "NVLink 4": 450e9,
    # PCIe x16: GT/s per lane x 16 lanes x 128b/130b encoding / 8 bits (PCI-SIG base specs).
    "PCIe Gen5 x16": 32e9 * 16 * 128 / 130 / 8,  # 63.0 GB/s
    "PCIe Gen4 x16": 16e9 * 16 * 128 / 130 / 8,  # 31.5 GB/s
}


# Predictions: a lower bound per denoising step, per parallel layout


ONE_GPU = Layout()
LAYOUTS = (ONE_GPU, Layout(step=4), Layout(layer=4), Layout(tp=2), Layout(tp=4))


@dataclass(frozen=True)
class Prediction:
    """Lower-bound seconds per denoising step of one request, on the busiest GPU of a layout.
    ``step_s`` = ``flop_s + memory_s + comm_s`` is the time per step when the layout is kept
    busy (enough requests in flight for every stage); ``latency_s`` is one request alone."""
    model: str
    gpu: str
    layout: str
    link: str
    dtype: str
    gpus: int
    flop_s: float  # time of the compute-bound ops (FLOPs / peak)
    memory_s: float  # time of the bandwidth-bound ops (bytes / memory bandwidth)
    comm_s: float  # link time (handoffs or all-reduces; not overlapped)
    comm_bytes: float  # bytes the busiest GPU sends per step
    step_s: float
    latency_s: float
    weights_gb: float  # weights one GPU holds (activations, text encoder and VAE not counted)
    fits: bool  # weights_gb within the GPU's memory

    @property
    def bound(self) -> str:
        """Which term dominates: "compute", "bandwidth" or "link"."""
        terms = {"compute": self.flop_s, "bandwidth": self.memory_s, "link": self.comm_s}
        return max(terms, key=terms.get)


def op_seconds(op: Op, hw: Hardware, dtype: str = "bf16") -> tuple[float, float]:
    """(compute-bound s, bandwidth-bound s) of all ``op.count`` calls: one of the two is 0."""
    flop_t, byte_t = op.flops / hw.peak_flops(dtype), op.bytes / hw.mem_bw
    return (op.count * flop_t, 0.0) if flop_t >= byte_t else (0.0, op.count * byte_t)


def ops_seconds(ops: Sequence[Op], hw: Hardware, dtype: str = "bf16") -> tuple[float, float]:
    """``op_seconds`` summed over ``ops``: (compute-bound s, bandwidth-bound s)."""
    pairs = [op_seconds(op, hw, dtype) for op in ops]
    return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


def bandwidth_bound_tokens(dim: int, ridge: float, nbytes: int = 2) -> float:
    """Tokens m below which a (m, D) x (D, D) projection is bandwidth-bound: its intensity,
    2 m D^2 FLOPs over nbytes (2 m D + D^2) bytes, equals ``ridge`` there. About the ridge
    itself while m << D: the weights' bytes dominate and each one is used m times."""
    return ridge * nbytes * dim / (2 * dim - 2 * nbytes * ridge)


def bandwidth_bound_share(model: str, latent_shape: tuple[int, ...], hw: Hardware, *,
                          sp: int = 1, dtype: str = "bf16") -> float:
    """Share of one block's lower bound on ``hw`` spent in bandwidth-bound ops, with the
    tokens split ``sp`` ways: the regime of a workload per GPU, not of the model."""
    compute, memory = ops_seconds(block_ops(model, latent_shape, sp=sp, dtype=dtype), hw, dtype)
    return memory / (compute + memory)


def format_op_times(ops: Sequence[Op], hw: Hardware, dtype: str = "bf16") -> str:
    """Per op: calls, GFLOP, MB, FLOP/byte, microseconds on ``hw`` (all calls) and its bound."""
    rows = [f"{'op':<26}{'calls':>6}{'GFLOP':>11}{'MB':>10}{'FLOP/B':>9}{'us':>10}  bound"]
    for op in ops:
        flop_s, mem_s = op_seconds(op, hw, dtype)
        rows.append(f"{op.name:<26}{op.count:>6}{op.flops / 1e9:>11,.1f}{op.bytes / 1e6:>10,.1f}"
                    f"{op.intensity:>9,.1f}{(flop_s + mem_s) * 1e6:>10,.1f}  "
                    f"{'compute' if flop_s else 'bandwidth'}")
    return "\n".join(rows)


def busiest_stage_share(preset: ModelPreset, stages: int, num_steps: int) -> float:
    """The share of the steps the busiest step-split stage runs: 1 / stages, or for Wan 2.2 the
    cut at the expert boundary (``partition.expert_sizes`` on the preset's shifted schedule):
    26 of 40 steps on 2 stages, so a filled pipeline's stage 1 idles 12/26 of the time."""
    if preset.experts == 1:
        return 1 / stages
    sigmas = [1 - i / num_steps for i in range(num_steps)]  # Euler's grid, shifted (no torch)
    high = sum(1000 * preset.shift * s / (1 + (preset.shift - 1) * s) >= preset.boundary
               for s in sigmas)
    return max(expert_sizes([0] * high + [1] * (num_steps - high), stages)) / num_steps


def predict(model: str, gpu: str, layout: Layout = ONE_GPU, *, link: str | None = None,
            latent_shape: tuple[int, ...] | None = None, dtype: str = "bf16",
            cfg: bool = True, num_steps: int = 50, attention: str = "flash") -> Prediction:
    """Lower-bound time of one denoising step (2 forwards with CFG) of ``model`` on ``gpu``.

    Per forward and GPU: t = sum over its ops of max(FLOPs / peak, bytes / bandwidth). Then

    * 1 GPU / TP=t: step = M (t + all-reduces), M = 2 forwards with CFG, else 1;
    * step-split P: every stage runs whole steps; kept busy, a step costs step / P plus the
      latent handoff (once per stage per request) / num_steps; one request alone gets no faster;
    * layer-split P: stage s runs its blocks (stage 0 the prologue, the last the epilogue) and
      sends h; kept busy, a step costs M (t_busiest + handoff); one request alone (its CFG halves
      as M micro-batches, GPipe) costs sum_s (t_s + handoff) + (M - 1) max_s (t_s + handoff);
    * sequence axes (Ulysses x ring = P): each GPU runs every op on S/P tokens (attention: S/P
      queries over all S keys) and sends its all-to-alls and K/V hops per block; CFG=2: each
      branch runs one of the M = 2 forwards and the two exchange their velocity (one fp32
      latent) per step. Latency = step: one request alone keeps every GPU busy."""
    p, hw, m, dtype = get_preset(model), GPUS[gpu], 2 if cfg else 1, dtype_name(dtype)
    shape = tuple(latent_shape or p.latent_shape)
    check_model(layout, p, num_steps=num_steps, latent_shape=shape, guided=cfg)
    pp = layout.stages
    link = (link or hw.links[0]) if layout.ranks > 1 else "-"
    bw = LINKS.get(link, float("inf"))  # one GPU: nothing crosses a link
    kw = dict(dtype=dtype, attention=attention, tp=layout.tp, sp=layout.sp,
              ulysses=layout.ulysses)
    if layout.splits_blocks:  # it stands alone: no TP, no sequence axes
        sizes = even_sizes(p.num_layers, pp)
        stages = [model_ops(p, shape, num_blocks=n, prologue=s == 0,
                            epilogue=s == pp - 1, **kw) for s, n in enumerate(sizes)]
        send_bytes = layer_handoff_bytes(p, shape, dtype=dtype)
    else:
        sizes, stages, send_bytes = [p.num_layers], [model_ops(p, shape, **kw)], 0.0
    ar_bytes = ring_allreduce_traffic(tp_allreduce_bytes(p, shape, dtype=dtype), layout.tp)
    ar_bytes += sp_traffic_per_block(p, shape, ulysses=layout.ulysses, ring=layout.ring,
                                     dtype=dtype)  # one of the two is 0
    if cfg and layout.cfg == 2:  # one forward per branch, then the predictions exchanged
        m = 1  # (a 2-rank all-gather of the model output; a TP rank sends its 1/tp share)
        send_bytes += math.prod(shape) * DTYPE_BYTES[dtype] / layout.tp
    # per forward and stage: (flop s, memory s, link s) and the bytes it sends
    per_stage = [(*ops_seconds(ops, hw, dtype), (n * ar_bytes + send_bytes) / bw)
                 for ops, n in zip(stages, sizes, strict=True)]
    slot = [sum(t) for t in per_stage]
    busiest = max(range(len(slot)), key=slot.__getitem__)
    flop_s, mem_s, comm_s = (m * x for x in per_stage[busiest])
    comm_bytes = m * (sizes[busiest] * ar_bytes + send_bytes)
    weights_gb = max(totals(ops).weights for ops in stages) * DTYPE_BYTES[dtype] / 1e9
    held = 1 if layout.step > 1 else p.experts  # Wan 2.2: a stage holds one expert
    weights_gb *= held
    if layout.fsdp:  # held: the root, 1/P of each held expert's blocks, two blocks gathered
        # (running, prefetched); every block's other shards arrive once a forward
        block = totals(block_ops(p, shape, **kw)).weights * DTYPE_BYTES[dtype]
        gather = p.num_layers * block * (layout.shards - 1) / layout.shards
        weights_gb += (held * p.num_layers * block * (1 / layout.shards - 1) + 2 * block) / 1e9
        comm_s += m * gather / bw
        comm_bytes += m * gather
    if layout.step > 1:
        handoff_bytes = step_handoff_bytes(shape)
        latency = flop_s + mem_s + comm_s + handoff_bytes / bw * (pp - 1) / num_steps
        share = busiest_stage_share(p, pp, num_steps)  # 1 / pp, unless experts cut it
        flop_s, mem_s = flop_s * share, mem_s * share
        comm_s = comm_s * share + handoff_bytes / bw / num_steps
        comm_bytes = comm_bytes * share + handoff_bytes / num_steps
    elif layout.splits_blocks:  # PipeFusion bounded as layer split: its patches' fill aside
        latency = sum(slot) + (m - 1) * slot[busiest]
    else:
        latency = flop_s + mem_s + comm_s
    return Prediction(p.name, hw.name, layout.name, link, dtype, layout.ranks, flop_s, mem_s,
                      comm_s, comm_bytes, flop_s + mem_s + comm_s, latency, weights_gb,
                      weights_gb * 1e9 <= hw.mem_bytes)


def prediction_table(models: Sequence[str] = ("wan2.1-1.3b", "wan2.1-14b"),
                     gpus: Sequence[str] = tuple(GPUS), layouts: Sequence[Layout] = LAYOUTS,
                     **kwargs) -> list[Prediction]:
    """``predict`` for every model x GPU x layout, and every link a multi-GPU layout could use."""
    return [predict(model, gpu, layout, link=lk, **kwargs)
            for model in models for gpu in gpus for layout in layouts
            for lk in (GPUS[gpu].links if layout.ranks > 1 else (None,))]


def format_predictions(rows: Sequence[Prediction]) -> str:
    """A fixed-width table of predictions, times in milliseconds."""
    w = max([17] + [len(r.layout) + 1 for r in rows])
    m = max([12] + [len(r.model) + 1 for r in rows])
    out = [f"{'model':<{m}}{'gpu':<10}{'layout':<{w}}{'link':<14}{'compute':>9}{'memory':>8}"
           f"{'comm':>8}{'step ms':>9}{'latency':>9}  {'bound':<10}{'GB/GPU':>7}"]
    for r in rows:
        out.append(f"{r.model:<{m}}{r.gpu:<10}{r.layout:<{w}}{r.link:<14}{r.flop_s * 1e3:>9,.0f}"
                   f"{r.memory_s * 1e3:>8,.0f}{r.comm_s * 1e3:>8,.1f}{r.step_s * 1e3:>9,.0f}"
                   f"{r.latency_s * 1e3:>9,.0f}  {r.bound:<10}{r.weights_gb:>6.1f}"
                   f"{'' if r.fits else '!'}")
    return "\n".join(out)


def assumptions(num_steps: int = 50, cfg: bool = True) -> str:
    """The assumptions behind every prediction, to print beside the table."""
    return "\n".join([
        "time(op) = max(FLOPs / dense peak, bytes / memory bandwidth), summed over ops",
        "  (a lower bound: no kernel reaches either ceiling; launch overheads ignored)",
        f"one step = {'2 forwards (CFG: cond + uncond)' if cfg else '1 forward'}; attention "
        "as one fused (flash) kernel; minimum bytes (inputs read once, outputs written once)",
        "links per direction, ring all-reduce sends 2(n-1)/n of the message, no latency term;",
        "  communication is not overlapped with compute",
        "TP: 3 all-reduces of (B,S,D) per block + the q/k RMSNorm statistics",
        "Ulysses: 4 all-to-alls of (B,S/P,D) per block; ring: K and V of S/R tokens R - 1 hops "
        "per block (USP: both); CFG=2: the model output (the latent's size) exchanged per step",
        "layer-split: h (B,S,D) per stage per forward; step-split: the "
        f"fp32 latent once per stage per request, amortised over {num_steps} steps",
        "step ms = the busiest GPU's time per step with the layout kept busy; latency = one "
        "request alone (layer-split: CFG halves as 2 micro-batches, GPipe)",
        "GB/GPU = weights only ('!' = does not fit; activations, text encoder, VAE not counted);",
        "  FSDP: the root, 1/P of the blocks and 2 gathered blocks; the gathers on the link",
    ])
