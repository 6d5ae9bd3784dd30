"""Checker for lab 08: run it with ``pytest labs/lab08_graph_step``.

A CPU cannot capture a CUDA graph, so the checker enforces, one rule at a time, what a capture
would, with what a CPU has:

1. numbers and addresses: steps 0..3 of the tiny model, each step's inputs copied into the same
   buffers, must equal ``Denoiser.step``, land in ``bufs.out`` and leave the inputs untouched;
2. the same operators on every step: a ``TorchDispatchMode`` records what each call dispatches;
3. no host syncs, no tensors made from Python data, no shapes that depend on values (the same
   record);
4. replay: one call recorded with ``make_fx``, which keeps the dispatched operators and freezes
   every value read on the host, as a capture does; the recording is then run on a second
   request's inputs, copied into the same buffers, step after step.
"""

from __future__ import annotations

import linecache
import sys
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

HERE = Path(__file__).parent
NUM_STEPS = 4
# The first request's steps run eagerly, the second's are replayed; both seeds are drawn at
# each run (hidden cases: no fixed latent to fit), and a failure names them.
# The reference solution runs Denoiser.step's kernels on the same inputs, so it is bitwise
# equal; a rewrite of the Euler update that is the same algebra (x - (sigma - sigma_next) v)
# may round differently by an ulp. A stale timestep or sigma is off by orders more.
STEP_TOL = {"rtol": 1e-5, "atol": 1e-6}

SYNC_OPS = {"aten._local_scalar_dense"}  # what .item(), int(t), bool(t), x[0-d int] dispatch
HOST_DATA_OPS = {"aten.lift_fresh", "aten.lift_fresh_copy"}  # torch.tensor(python data)
# Outputs sized by tensor values (repeat_interleave only with a tensor of repeats).
DYNAMIC_OPS = {"aten.nonzero", "aten.masked_select", "aten.unique", "aten._unique2",
               "aten.unique_consecutive", "aten.repeat_interleave.Tensor",
               "aten.repeat_interleave.self_Tensor"}


class _Recorder(TorchDispatchMode):
    """Every operator one call dispatches, in order, with the line of the graded file that led
    to it (the innermost frame in that file), and the ones a capture could not take."""

    def __init__(self, source: str):
        super().__init__()
        self.source = source
        self.ops: list[tuple[str, int | None]] = []
        self.hazards: list[tuple[str, str, int | None]] = []  # (kind, operator, line)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        op, line = str(func), self._line()
        self.ops.append((op, line))
        kind = _hazard(op, str(func.overloadpacket), args)
        if kind is not None:
            self.hazards.append((kind, op, line))
        return func(*args, **(kwargs or {}))

    def _line(self) -> int | None:
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename != self.source:
            frame = frame.f_back
        return None if frame is None else frame.f_lineno


def _hazard(op: str, packet: str, args) -> str | None:
    if packet in SYNC_OPS:
        return "host sync"
    if packet in HOST_DATA_OPS:
        return "host data"
    if packet in DYNAMIC_OPS or op in DYNAMIC_OPS:
        return "dynamic shape"
    # A boolean mask picks as many elements as it holds True values.
    masked = (packet in ("aten.index", "aten.index_put", "aten.index_put_") and len(args) > 1
              and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1]))
    return "dynamic shape" if masked else None


def _where(source: str, line: int | None) -> str:
    """``line N of file: `code` `` for a message, or where the line is unknown, say so."""
    if line is None:
        return "code outside your file"
    code = linecache.getline(source, line).strip()
    return f"line {line} of {Path(source).name}: `{code}`"


def check(impl, pool=None) -> None:
    """Run the student's ``graph_step`` eagerly on every step of the tiny model, under an
    operator recorder, then as one recording replayed; raise on the first broken rule.
    ``pool`` is unused: this lab starts no ranks."""
    from ppdit.teaching.labkit import hidden_cases, one_thread

    with hidden_cases() as rng, one_thread(), torch.no_grad():  # the requests' seeds drawn now
        _check(impl, (rng.randrange(10_000), rng.randrange(10_000)))


def _check(impl, seeds: tuple[int, int]) -> None:
    from ppdit.model import build_model
    from ppdit.presets import get_preset
    from ppdit.sampler import Denoiser, Request, SamplingConfig, model_forward, prompt_embeddings

    preset, sampling = get_preset("tiny"), SamplingConfig(num_steps=NUM_STEPS)
    model = build_model(preset, seed=0)
    forward, den = model_forward(model), Denoiser(model, preset, sampling)
    shape = preset.latent_shape
    first, second = (Request(k, seed) for k, seed in enumerate(seeds))
    source = str(Path(impl.__file__).resolve())
    # The static buffers, allocated once: every call below reads and writes these tensors.
    tensors = {"latent": torch.zeros(shape), "step": torch.zeros((), dtype=torch.int64),
               "text": torch.zeros(1, preset.text_len, preset.text_dim),
               "timesteps": sampling.timesteps(), "sigmas": sampling.sigmas(),
               "out": torch.empty(shape)}
    bufs = impl.StaticBuffers(**tensors)

    latents, text = _reference(den, first, shape), prompt_embeddings(first, preset)
    records = []
    for i in range(NUM_STEPS):
        _load(tensors, latents[i], i, text)
        before = {name: t.clone() for name, t in tensors.items() if name != "out"}
        with _Recorder(source) as record:
            result = impl.graph_step(forward, bufs)
        records.append(record)
        _check_addresses(bufs, result, tensors, before, i)
        _check_numbers(tensors["out"], latents[i + 1], i)
    _check_same_operators(records, source)
    _check_hazards(records, source)
    _check_replay(impl, forward, tensors, _reference(den, second, shape),
                  prompt_embeddings(second, preset))


def _reference(den, request, shape) -> list[torch.Tensor]:
    """``Denoiser.step``'s latents for one request: x_0 (its noise), x_1, ..., x_NUM_STEPS."""
    state = den.initial_state(request, shape)
    latents = [state.latent]
    for _ in range(NUM_STEPS):
        state = den.step(state, request)
        latents.append(state.latent)
    return latents


def _load(tensors: dict[str, torch.Tensor], latent: torch.Tensor, i: int,
          text: torch.Tensor) -> None:
    """What the host does before a replay: copy the inputs in; poison the output (NaN), so a
    step that does not write it shows."""
    tensors["latent"].copy_(latent)
    tensors["step"].fill_(i)
    tensors["text"].copy_(text)
    tensors["out"].fill_(float("nan"))


def _check_addresses(bufs, result, tensors: dict[str, torch.Tensor],
                     before: dict[str, torch.Tensor], i: int) -> None:
    out = tensors["out"]
    for name, t in tensors.items():
        if getattr(bufs, name) is not t:
            raise AssertionError(
                f"graph_step rebound bufs.{name} to another tensor (step {i}): a graph keeps the "
                "addresses it recorded, so write into the buffers (copy_, out=), never rebind")
    if result is not None and not isinstance(result, torch.Tensor):
        raise AssertionError(f"graph_step returned a {type(result).__name__} (step {i}): it "
                             "returns bufs.out, or None")
    if result is not None and (result.data_ptr(), result.shape) != (out.data_ptr(), out.shape):
        raise AssertionError(
            f"graph_step returned a new tensor instead of bufs.out (step {i}). Eagerly a new "
            "tensor gets a new address on every call; a replayed graph writes where the "
            "recorded call wrote, into the graph's own memory, which the next replay "
            "overwrites. The caller therefore reads every step's result from bufs.out: write "
            "into it (euler_update(..., out=bufs.out) or bufs.out.copy_(...)) and return it, "
            "or None")
    for name, old in before.items():
        if not torch.equal(tensors[name], old):
            raise AssertionError(
                f"graph_step modified bufs.{name} (step {i}): the inputs must hold the same "
                "values after the step as before (the caller may replay or read them); write "
                "only into bufs.out")
    if torch.isnan(out).any():
        raise AssertionError(
            f"graph_step left (part of) bufs.out unwritten at step {i}: the checker filled it "
            "with NaN before the call. The step's result must land in bufs.out")


def _check_numbers(got: torch.Tensor, want: torch.Tensor, i: int) -> None:
    if not torch.allclose(got, want, **STEP_TOL):
        diff = (got - want).abs().max().item()
        raise AssertionError(
            f"step {i}: bufs.out differs from Denoiser.step (max |diff| {diff:.3g}, tolerance "
            f"{STEP_TOL}). One Euler step is x + (sigmas[i+1] - sigmas[i]) * v with "
            "v = forward(x, timesteps[i] as a (B,) tensor, text)")


def _check_same_operators(records: list[_Recorder], source: str) -> None:
    """A graph replays the operators of the call it recorded, for every step."""
    first = [op for op, _ in records[0].ops]
    for i, record in enumerate(records[1:], start=1):
        ops = [op for op, _ in record.ops]
        if ops == first:
            continue
        k = next((k for k, (a, b) in enumerate(zip(first, ops, strict=False)) if a != b),
                 min(len(first), len(ops)))
        a = first[k] if k < len(first) else "nothing (the call had ended)"
        b = ops[k] if k < len(ops) else "nothing (the call had ended)"
        line = (record.ops[k] if k < len(ops) else records[0].ops[k])[1]
        raise AssertionError(
            f"step {i} dispatched other operators than step 0: operator #{k} is {a} at step 0 "
            f"but {b} at step {i}, from {_where(source, line)}. A CUDA graph replays the "
            "operators of the one call it recorded, whatever step's inputs are in the buffers: "
            "a Python decision on the step's value (an `if` on bufs.step, which must read it "
            "on the host, too) is taken once, at capture. Use one formula that holds on every "
            "step, or choose between values with tensor ops (torch.where)")


def _check_hazards(records: list[_Recorder], source: str) -> None:
    found = [h for record in records for h in record.hazards]
    for kind in ("host sync", "host data", "dynamic shape"):
        mine = [(op, line) for k, op, line in found if k == kind]
        if not mine:
            continue
        (op, line), count = mine[0], len(mine) // len(records)
        where = _where(source, line)
        if kind == "host sync":
            raise AssertionError(
                f"graph_step makes a host sync: {op} ({count} per step), first from {where}. "
                "It hands a tensor's value to Python, as .item(), int(t), float(t), bool(t) and "
                "`if t:` do, and as indexing with a 0-d integer tensor does: x[bufs.step] calls "
                ".item() on the index inside PyTorch. While a stream captures, the GPU computes "
                "nothing, so there is no value to hand over: the capture fails. Keep the step a "
                "tensor and index with a 1-element one, x[bufs.step.view(1)] (aten.index, a "
                "device operator)")
        if kind == "host data":
            raise AssertionError(
                f"graph_step builds a tensor from Python data: {op}, from {where}. A graph "
                "replays the value it held at capture, and on a GPU the copy from host memory "
                "waits for the device, which a capture does not allow. Derive the value from "
                "the buffers (bufs.timesteps, bufs.sigmas) with tensor operators")
        raise AssertionError(
            f"graph_step makes a tensor whose size depends on tensor values: {op}, from "
            f"{where}. Sizing it needs the values on the host (a host sync), and a graph "
            "replays fixed shapes")


def _check_replay(impl, forward, tensors: dict[str, torch.Tensor], latents: list[torch.Tensor],
                  text: torch.Tensor) -> None:
    """Record one call at step 0 of a second request, then run the recording on each step's
    inputs copied into the buffers: a CUDA graph's life, with make_fx as the recorder."""
    from torch.fx.experimental.proxy_tensor import make_fx

    names = list(tensors)

    def one_call(*buffers: torch.Tensor) -> None:
        impl.graph_step(forward, impl.StaticBuffers(**dict(zip(names, buffers, strict=True))))

    _load(tensors, latents[0], 0, text)
    try:
        recording = make_fx(one_call)(*tensors.values())
    except Exception as err:
        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise AssertionError(f"recording graph_step with make_fx (the checker's stand-in for "
                             f"a capture) failed: {first_line}") from err
    for i in range(NUM_STEPS):
        _load(tensors, latents[i], i, text)
        recording(*tensors.values())
        got = tensors["out"]
        if not torch.allclose(got, latents[i + 1], **STEP_TOL):
            diff = (got - latents[i + 1]).abs().nan_to_num(float("inf")).max().item()
            raise AssertionError(
                f"one recording of graph_step (made at step 0 of a second request, as a capture "
                f"would be), run on step {i}'s inputs copied into the buffers, differs from "
                f"Denoiser.step (max |diff| {diff:.3g}). The recording keeps the dispatched "
                "operators and every value your step read on the host, as a CUDA graph does: "
                "such values stay frozen at their recorded value. Something in your step does "
                "not come from the buffers at run time: a Python number (from .tolist(), "
                ".numpy(), a counter or a cache kept in Python) or a tensor other than the "
                "buffers")


def test_lab08():
    from ppdit.teaching.labkit import lab_implementation

    check(lab_implementation(HERE / "lab08_graph_step.py"))
