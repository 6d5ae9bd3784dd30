"""One denoising step recorded once as a CUDA graph and replayed; on CPU, the same discipline.

Why: a DiT step is hundreds to thousands of small kernels, each launched by Python through the
dispatcher (~5-10 µs apiece). When the kernels are short (small latents, small models, one
request) the GPU idles between launches: the step is *overhead-bound*. A CUDA graph records one
step's kernels once; ``replay()`` launches them all in one call, without Python, the dispatcher
or the allocator in the loop. What a graph fixes for good, ``StepGraph`` enforces everywhere:

* **shapes** — another latent shape needs another graph (``StepGraph`` raises rather than
  replay the wrong kernels);
* **addresses** — inputs are *copied into* static buffers (``static_latent``, ``static_step``,
  ``static_text``); the output is *always* ``static_out``, overwritten by the next step;
* **no host syncs or decisions** — ``.item()``, ``bool(tensor)`` in the step would fail during
  capture or be frozen into the graph: the step index is a device tensor, and the schedule
  lookups (``timesteps[idx]``, ``sigmas[idx]``) happen inside the graph.

The body is ``Denoiser.step`` without guidance (``predict_velocity`` then ``euler_update``): on
CPU it runs eagerly, bitwise equal; on GPU equal to the eager step up to kernel choice. P2P stays
*outside* the graph (receive into your tensor, ``step`` copies it in; send from ``static_out``):
captured NCCL work ties the graph to a communicator, where the shutdown hang below comes from.

Shutdown order (pytorch/pytorch#115388: ``destroy_process_group()`` can hang in
``ncclCommDestroy`` while a graph that captured NCCL work is still alive)::

    1. stop replaying; placement.synchronize()   -- no graph work in flight
    2. runner.close()                            -- graph.reset(): the graph and its pool go
    3. dist.barrier()                            -- every rank has released its graphs
    4. dist.destroy_process_group()

``ppdit.runtime`` does 3 and 4 after the worker returns, so a worker closes its runners (2)
before returning — a ``with StepGraph(...)`` block does it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ppdit import sampler
from ppdit.presets import ModelPreset, get_preset
from ppdit.runtime.device import Placement


class StepGraph:
    """A denoising step for fixed shapes: captured into a ``torch.cuda.CUDAGraph`` on a CUDA
    placement, run eagerly (same static buffers, same checks) anywhere else.

    ``step(latent, i)`` -> ``static_out`` (the latent after step i); batch B is ``latent_shape[0]``.
    """

    def __init__(self, model: torch.nn.Module, *, latent_shape: Sequence[int],
                 sampling: sampler.SamplingConfig, preset: str | ModelPreset = "tiny",
                 placement: Placement | None = None, warmup: int = 3):
        if sampling.uses_cfg:
            raise ValueError(
                f"StepGraph captures steps without classifier-free guidance (guidance_scale="
                f"{sampling.guidance_scale}): a guided step doubles the batch only on some "
                "steps (a dynamic shape) and predict_velocity decides that with a host sync "
                "(bool(guided.any())). Use guidance_scale=1.0, or one graph per batch shape")
        if warmup < 1:
            raise ValueError(f"warmup={warmup} must be >= 1: the first runs allocate and "
                             "choose kernels, which must not happen during capture")
        self.model, self.forward, self.sampling = model, sampler.model_forward(model), sampling
        self.preset = get_preset(preset)
        device = next(model.parameters()).device
        self.placement = placement or Placement(device, "gloo")
        if self.placement.device != device:
            raise ValueError(f"model is on {device} but placement says {self.placement.device}")
        self.latent_shape = tuple(latent_shape)
        b = self.latent_shape[0]
        self.static_latent = torch.zeros(self.latent_shape, device=device)
        self.static_step = torch.zeros(b, dtype=torch.int64, device=device)  # (B,) step index
        self.static_text = torch.zeros(b, self.preset.text_len, self.preset.text_dim, device=device)
        self.static_out = torch.empty_like(self.static_latent)
        self.sigmas = sampling.sigmas().to(device)
        self.timesteps = sampling.timesteps().to(device)
        self._closed = False
        self.placement.implicit_sync("entering torch.cuda.graph (it synchronises the device)")
        self.graph = self._capture(warmup) if self.placement.is_cuda else None

    @property
    def captured(self) -> bool:
        """Whether steps replay a CUDA graph (False: eager, e.g. on CPU)."""
        return self.graph is not None

    # -- the captured region ----------------------------------------------------------------

    @torch.no_grad()
    def _body(self) -> None:
        """Static inputs -> static_out. No host syncs, no Python decisions on tensor values."""
        idx = self.static_step
        v = sampler.predict_velocity(self.forward, self.static_latent, self.timesteps[idx],
                                     sampler.Conditioning(self.static_text, None), 1.0)
        sampler.euler_update(self.static_latent, v, self.sigmas[idx], self.sigmas[idx + 1],
                             out=self.static_out)

    def _capture(self, warmup: int) -> torch.cuda.CUDAGraph:
        """Warm up on a side stream (allocations, kernel choice), then record one step."""
        device = self.placement.device
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(warmup):
                self._body()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._body()
        self.placement.synchronize()
        return graph

    # -- running ----------------------------------------------------------------------------

    def set_text(self, text: torch.Tensor) -> None:
        """Copy a prompt embedding (B, text_len, text_dim) into the static text buffer."""
        self._check("text", text, self.static_text)
        self.static_text.copy_(text)

    def load_request(self, request: sampler.Request) -> None:
        """Use a request's (synthetic) prompt, built exactly as ``Denoiser`` builds it."""
        text = sampler.prompt_embeddings(request, self.preset, batch=self.latent_shape[0])
        self.set_text(text.to(self.placement.device))

    def step(self, latent: torch.Tensor, step_index: int) -> torch.Tensor:
        """Run step ``step_index`` on ``latent`` (copied in) -> ``static_out`` (not a copy!)."""
        if self._closed:
            raise RuntimeError("step() after close(): build a new StepGraph")
        if not 0 <= step_index < self.sampling.num_steps:
            raise ValueError(f"step_index={step_index} is outside 0..{self.sampling.num_steps - 1}")
        self._check("latent", latent, self.static_latent)
        if latent.data_ptr() != self.static_latent.data_ptr():
            self.static_latent.copy_(latent)
        self.static_step.fill_(step_index)
        if self.graph is None:
            self._body()
        else:
            self.graph.replay()
        return self.static_out

    def run(self, latent: torch.Tensor, steps: range) -> torch.Tensor:
        """Run consecutive ``steps`` from ``latent``; returns ``static_out`` after the last."""
        out = latent
        for i in steps:
            out = self.step(out, i)
        return out

    def _check(self, what: str, given: torch.Tensor, static: torch.Tensor) -> None:
        if tuple(given.shape) != tuple(static.shape):
            redo = ("on GPU that needs a new capture" if self.placement.is_cuda
                    else "on GPU it would need a new capture")
            raise ValueError(f"{what} shape {tuple(given.shape)} differs from the shape this "
                             f"StepGraph was built for, {tuple(static.shape)}: a graph replays "
                             f"fixed shapes; build another StepGraph ({redo})")
        if given.dtype != static.dtype or given.device != static.device:
            raise ValueError(f"{what} is {given.dtype} on {given.device}; the static buffer is "
                             f"{static.dtype} on {static.device}: move it first (a copy across "
                             "devices here would hide a host sync in the step)")

    # -- shutdown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Release the graph and its memory pool (step 2 of the shutdown order above)."""
        if self.graph is not None:
            self.placement.synchronize()
            self.graph.reset()
            self.graph = None
        self._closed = True  # a closed runner refuses to step

    def __enter__(self) -> StepGraph:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
