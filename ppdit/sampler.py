"""Flow-matching sampling for Wan: the shifted sigma schedule, the Euler update, and what a
handoff between step stages must carry.

Flow matching writes a noisy latent as ``x_sigma = (1 - sigma) x_0 + sigma eps`` and trains the
DiT to predict the velocity ``v = eps - x_0 = dx/dsigma``. Sampling integrates from sigma = 1
(noise) to 0 (the clean latent); Euler does it in ``num_steps`` moves
``x <- x + (sigma_next - sigma) v``. Wan shifts the schedule towards high noise,
``sigma' = shift sigma / (1 + (shift - 1) sigma)`` (3.0 at 480p, 5.0 at 720p), spending more
steps where the video's coarse layout is decided.

The *handoff* (``StepState``): Euler is one-step, so step ``i`` needs only ``i`` and the latent
at ``sigmas[i]`` (the rest every rank knows); a multistep solver (UniPC, Wan pipeline's default,
``ppdit.checkpoint.solver``) adds 3 more latents of memory in ``StepState.solver_state``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from functools import partial

import torch

from ppdit.model import DummyDiT, forward_by_stages, held
from ppdit.model import expert as model_expert
from ppdit.presets import ModelPreset, get_preset

CFG_MODES = ("batched", "split")


@dataclass(frozen=True)
class SamplingConfig:
    """How to denoise: the same on every rank, so it never travels with a handoff."""

    num_steps: int = 28  # denoising steps (the earlier report used 28 for its dummy model)
    shift: float = 3.0  # Wan 2.1's flow shift at 480p
    guidance_scale: float = 1.0  # classifier-free guidance; 1.0 turns CFG (and its 2x cost) off
    # Guide only the first k steps (None: all). Guidance matters most while the layout forms;
    # limiting it (Kynkäänniemi et al. 2024) saves compute but makes early steps cost 2x the
    # late ones, which is what a cost-weighted step split must balance.
    guidance_steps: int | None = None
    # Wan 2.2's two experts: the timestep from which down ``transformer_2`` takes over
    # (``boundary_ratio x num_train_timesteps``: 875 for T2V A14B), and its own guidance scale
    # (None: ``guidance_scale``; used only where guidance is on, as ``WanPipeline`` does)
    boundary: float | None = None
    guidance_scale_2: float | None = None

    def __post_init__(self) -> None:
        if self.num_steps < 1:
            raise ValueError(f"num_steps={self.num_steps} must be >= 1")
        if self.shift <= 0:
            raise ValueError(f"shift={self.shift} must be > 0 "
                             "(sigma' = shift s / (1 + (shift - 1) s))")
        if self.guidance_steps is not None and not 0 <= self.guidance_steps <= self.num_steps:
            raise ValueError(f"guidance_steps={self.guidance_steps} must be in 0..num_steps "
                             f"({self.num_steps})")
        if self.guidance_scale_2 is not None and self.boundary is None:
            raise ValueError(f"guidance_scale_2={self.guidance_scale_2} is the second expert's "
                             "scale: it needs a two-expert model's boundary (Wan 2.2)")

    def scale_of(self, expert: int) -> float:
        """The guidance scale of ``expert``'s steps."""
        return self.guidance_scale_2 if expert == 1 and self.guidance_scale_2 is not None \
            else self.guidance_scale

    @property
    def uses_cfg(self) -> bool:
        """Whether any step runs the model on (conditional, unconditional) pairs."""
        return self.guidance_scale != 1.0 and self.guidance_steps != 0

    def guided(self, step_index: int) -> bool:
        """Whether step ``step_index`` applies classifier-free guidance (2 forwards' worth)."""
        limit = self.num_steps if self.guidance_steps is None else self.guidance_steps
        return self.uses_cfg and step_index < limit

    def step_costs(self) -> list[float]:
        """Relative model cost of each step: 2 with guidance, 1 without."""
        return [2.0 if self.guided(i) else 1.0 for i in range(self.num_steps)]

    def sigmas(self) -> torch.Tensor:
        """``num_steps + 1`` noise levels from 1 down to exactly 0, shifted (float32)."""
        s = torch.linspace(1.0, 0.0, self.num_steps + 1, dtype=torch.float64)
        s = self.shift * s / (1 + (self.shift - 1) * s)
        return s.to(torch.float32)

    def timesteps(self) -> torch.Tensor:
        """The model's timestep input for each step: ``1000 * sigma`` (Wan's training scale)."""
        return self.sigmas()[:-1] * 1000.0


def expert_steps(timesteps: Sequence[float], boundary: float | None) -> list[int]:
    """Which expert runs each step: 0 (``transformer``) while the timestep is at or above the
    boundary, then 1 (``transformer_2``), as ``WanPipeline`` switches; all 0 without one. At
    Wan 2.2 T2V's settings (UniPC, 40 steps, shift 12, boundary 875): 26 high-noise steps, 14
    low-noise ones."""
    return [0 if boundary is None or float(t) >= boundary else 1 for t in timesteps]


@dataclass(frozen=True)
class Request:
    """One generation request; its seed fixes both its noise and its (synthetic) prompt."""

    request_id: int
    seed: int


@dataclass
class StepState:
    """Everything step ``step_index`` needs from the steps before it: the handoff payload."""

    request_id: int
    step_index: int  # the next step to run, 0..num_steps; num_steps means done
    latent: torch.Tensor  # (B, C, F, H, W): x at sigmas[step_index]
    # A multistep solver's memory of earlier steps (``ppdit.checkpoint.solver``: UniPC's model
    # outputs, last sample, order counter); None for Euler, which needs none.
    solver_state: dict | None = None
    # A step cache's state leaving a step-split stage (``cache.BlockCache.export``); else None
    cache_state: dict | None = None


def initial_noise(request: Request, latent_shape: Sequence[int]) -> torch.Tensor:
    """Gaussian noise drawn on the CPU from the request's seed: identical on every device."""
    g = torch.Generator().manual_seed(request.seed)
    return torch.randn(tuple(latent_shape), generator=g)


def prompt_embeddings(request: Request, preset: str | ModelPreset, batch: int = 1) -> torch.Tensor:
    """A stand-in for the umT5 prompt encoding, (B, text_len, text_dim), from the request seed:
    ppdit ships no text encoder (umT5-XXL alone is 11 GB); a seeded Gaussian has the right shape
    and every rank agrees on it without sending it. Its own stream (seed + a large odd offset)
    keeps it independent of the noise."""
    p = get_preset(preset)
    g = torch.Generator().manual_seed(request.seed + 1_000_003)
    return torch.randn(batch, p.text_len, p.text_dim, generator=g)


@dataclass
class Conditioning:
    """A request's prompt as the DiT sees it, fixed over all steps: the one prompt type of
    ppdit (seeded stand-ins, or a folder's umT5 embeddings: ``ppdit.checkpoint.text``)."""

    text: torch.Tensor  # (B, L, text_dim) prompt embedding
    # (B, L, text_dim) the negative prompt's embedding, only with CFG (the stand-ins use zeros:
    # Wan pads prompts with zero rows, so an empty prompt is all padding)
    null_text: torch.Tensor | None
    # (B, C, 1, H, W) Wan 2.2 TI2V's image as the VAE encodes it (normalised, fp32): the first
    # latent frame, held fixed while the rest denoise
    image: torch.Tensor | None = None
    # (B, 4 + C, F, H, W) Wan 2.2 I2V's: the known frames' mask and the image's latent video,
    # read beside the latent in channels (``t2v.image``)
    channels: torch.Tensor | None = None

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> Conditioning:
        """The embeddings on ``device`` (and in ``dtype``, if given; the image stays fp32, as
        the latent does)."""
        def move(t, dt=dtype):
            return None if t is None else t.to(device=device, dtype=dt or t.dtype)
        return Conditioning(move(self.text), move(self.null_text), move(self.image, None),
                            move(self.channels, None))

    def model_input(self, latent: torch.Tensor, timestep: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """What the DiT reads at a step: with an image, its latent in place of the first frame,
        which sits at t = 0 while the others sit at the step's t: a timestep per latent frame
        (B, F), which the stage view gives every token of the frame (``model.condition``).
        ``WanImageToVideoPipeline(expand_timesteps=True)`` writes it as a mask, same values.
        With ``channels`` (I2V), those beside the latent."""
        if self.channels is not None:
            return torch.cat([latent, self.channels.to(latent.device)], dim=1), timestep
        if self.image is None:
            return latent, timestep
        latent = torch.cat([self.image.to(latent.device), latent[:, :, 1:]], dim=2)
        return latent, frame_timesteps(timestep, latent.shape[2])

    def finish(self, latent: torch.Tensor) -> torch.Tensor:
        """The final latent as decoded: with an image, the image's latent as its first frame."""
        return latent if self.image is None else self.model_input(latent, latent.new_zeros(1))[0]


def batched(conds: Sequence[Conditioning], name: str) -> torch.Tensor | None:
    """The requests' image ``name`` ("image" or "channels") in one batch, or None."""
    parts = [getattr(c, name) for c in conds if getattr(c, name) is not None]
    if parts and len(parts) != len(conds):
        raise ValueError("a batch mixes requests with and without an image: batch them apart")
    return torch.cat(parts) if parts else None


def frame_timesteps(timestep: torch.Tensor, frames: int) -> torch.Tensor:
    """(B, F) of a (B,) step: the image's frame (the first) at t = 0, the others at t."""
    per_frame = timestep[:, None].repeat(1, frames)
    per_frame[:, 0] = 0
    return per_frame


def model_forward(model: torch.nn.Module, cache=None) -> Callable[..., torch.Tensor]:
    """``forward(latent, timestep, text) -> velocity``: the stage view run end to end
    (== ``model(...)`` bitwise), or the dummy model's own call. A bf16 / fp16 model gets its
    inputs cast, as ``WanPipeline`` does (the latent stays fp32 between steps). ``cache``: a
    ``cache.BlockCache`` that may skip blocks."""
    if isinstance(model, DummyDiT):
        return model
    if model.dtype == torch.float32:
        return partial(forward_by_stages, model, cache=cache)
    return partial(_cast_forward, model, model.dtype, cache=cache)


def _cast_forward(model, dtype: torch.dtype, latent: torch.Tensor, timestep: torch.Tensor,
                  text: torch.Tensor, cache=None) -> torch.Tensor:
    return forward_by_stages(model, latent.to(dtype), timestep, text.to(dtype), cache)


def predict_velocity(forward: Callable[..., torch.Tensor], latent: torch.Tensor,
                     timestep: torch.Tensor, cond: Conditioning, guidance_scale: float,
                     guided: torch.Tensor | None = None,
                     cfg: str | Callable[..., torch.Tensor] = "batched") -> torch.Tensor:
    """The velocity for a batch (B, C, F, H, W); ``timestep`` (B,): each sample may sit at its
    own step (StreamDiffusion's stream batch). ``guided`` (B,) bool marks the samples that get
    classifier-free guidance, ``v = v_u + g (v_c - v_u)``; ``cfg``, how their unconditional
    halves run:

    * ``"batched"``: appended to the same batch, one ``forward`` (GEMM efficiency; other shapes
      than one request alone, so other bits);
    * ``"split"``: a second call on the guided samples alone, after the conditional one:
      ``WanPipeline``'s arithmetic, hence its bits;
    * a callable ``cfg(forward, latent, timestep, cond, guidance_scale)``: each half on a rank of
      its own (CFG-parallel, ``parallel.cfg.halves``), for batches guided whole."""
    check_cfg(cfg)
    latent, timestep = cond.model_input(latent, timestep)
    if guided is None or not bool(guided.any()):
        return forward(latent, timestep, cond.text)
    if cond.null_text is None:
        raise ValueError("guidance requested but the conditioning has no null prompt")
    if callable(cfg):
        if not bool(guided.all()):
            raise ValueError("CFG-parallel guides whole batches: every sample of a step must "
                             "be guided (guidance_steps None)")
        return cfg(forward, latent, timestep, cond, guidance_scale)
    if cfg == "split":
        v = forward(latent, timestep, cond.text)
        if bool(guided.all()):
            return guide(v, forward(latent, timestep, cond.null_text), guidance_scale)
        v = v.clone()
        v[guided] = guide(v[guided], forward(latent[guided], timestep[guided],
                                             cond.null_text[guided]), guidance_scale)
        return v
    b = latent.shape[0]
    both = forward(torch.cat([latent, latent[guided]]), torch.cat([timestep, timestep[guided]]),
                   torch.cat([cond.text, cond.null_text[guided]]))
    v, v_uncond = both[:b].clone(), both[b:]
    v[guided] = guide(v[guided], v_uncond, guidance_scale)
    return v


def check_cfg(cfg) -> None:
    """A CFG mode is one of ``CFG_MODES`` or a CFG-parallel policy (a callable)."""
    if not callable(cfg) and cfg not in CFG_MODES:
        raise ValueError(f"cfg={cfg!r} is not one of {CFG_MODES}")


def guide(v_cond: torch.Tensor, v_uncond: torch.Tensor, guidance_scale: float) -> torch.Tensor:
    """Classifier-free guidance: ``v_u + g (v_c - v_u)`` (the arithmetic of diffusers' Wan
    pipeline, term for term, so results match it bitwise)."""
    return v_uncond + guidance_scale * (v_cond - v_uncond)


def euler_update(latent: torch.Tensor, velocity: torch.Tensor, sigma: torch.Tensor,
                 sigma_next: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``x <- x + (sigma_next - sigma) v``; sigma tensors are (B,) so samples may differ.
    ``out``: a preallocated buffer (an outgoing P2P frame), same kernel, same bits."""
    dt = (sigma_next - sigma).to(latent.dtype).view(-1, *([1] * (latent.ndim - 1)))
    return torch.add(latent, dt * velocity, out=out)


class Denoiser:
    """The one sampling loop every layout drives, for one model and sampling config.

    ``generate``, every step-split stage and the stream batch call ``step`` / ``step_batch``;
    layouts that spread a forward over ranks plug it in (``forward=``) or compute the velocity
    themselves and call ``update`` (layer split's last stage). All run the same update
    arithmetic: their outputs equal one device bitwise wherever the forward is the same.
    """

    def __init__(self, model: torch.nn.Module, preset: str | ModelPreset | None,
                 sampling: SamplingConfig, *, forward: Callable[..., torch.Tensor] | None = None,
                 solver=None, cfg: str | Callable[..., torch.Tensor] = "batched", cache=None):
        check_cfg(cfg)
        self.model = model
        self.cache = cache  # a step cache (``cache.BlockCache``), told each forward's request
        self.cfg = cfg  # how a guided step's two halves run (``predict_velocity``)
        # replaces the Euler update (a folder's scheduler, ``ppdit.checkpoint.solver``): its own
        # timesteps, its state carried in ``StepState.solver_state``
        self.solver = solver
        # each transformer this rank holds, by expert index (a step runs its expert's; one
        # model is expert 0). ``forward``: a forward axis's (one, or one per expert), or None
        self.forwards = (forward if isinstance(forward, dict) else {0: forward} if forward else
                         {k: model_forward(m, cache) for k, m in held(model).items()})
        # sizes the seeded stand-in prompts; None when every prompt is given by ``condition_on``
        self.preset = None if preset is None else get_preset(preset)
        self.sampling = sampling
        self.device = next(model.parameters()).device
        self.sigmas = sampling.sigmas().to(self.device)
        self.timesteps = (sampling.timesteps() if solver is None else solver.timesteps
                          ).to(self.device)
        self.experts = expert_steps(self.timesteps.tolist(), sampling.boundary)
        self._cond: dict[int, Conditioning] = {}  # seeded stand-ins, computed on demand
        self._given: dict[int, Conditioning] = {}  # prompts handed in (kept: the plan's)

    def conditioning(self, request: Request) -> Conditioning:
        """Conditioning for a request: the one given (``condition_on``), else its seeded
        stand-in, computed once and cached (it is the same every step; the null prompt, zeros,
        only with CFG)."""
        if request.request_id in self._given:
            return self._given[request.request_id]
        if request.request_id not in self._cond:
            if self.preset is None:
                raise ValueError(f"request {request.request_id} has no prompt: pass it with "
                                 "condition_on(), or give the Denoiser a preset for seeded ones")
            text = prompt_embeddings(request, self.preset).to(self.device)
            self._cond[request.request_id] = Conditioning(
                text, torch.zeros_like(text) if self.sampling.uses_cfg else None)
        return self._cond[request.request_id]

    def condition_on(self, request: Request, text: torch.Tensor,
                     null_text: torch.Tensor | None = None, image: torch.Tensor | None = None,
                     channels: torch.Tensor | None = None) -> None:
        """Use these prompt embeddings (and image: ``Conditioning``) for ``request`` instead
        of its seeded stand-in."""
        if self.sampling.uses_cfg and null_text is None:
            null_text = torch.zeros_like(text)
        self._given[request.request_id] = Conditioning(text, null_text, image,
                                                       channels).to(self.device)

    def release(self, request: Request) -> None:
        """Forget a finished request's cached stand-in (given prompts stay: a plan run for
        several rounds needs them again)."""
        self._cond.pop(request.request_id, None)
        if self.cache is not None:
            self.cache.forget(request.request_id)

    def initial_state(self, request: Request, latent_shape: Sequence[int]) -> StepState:
        """Step 0's input: the request's seeded noise, on this device (drawn on the CPU from
        ``torch.Generator().manual_seed(seed)``, as diffusers' ``prepare_latents`` draws it
        with such a generator), and the solver's empty memory."""
        noise = initial_noise(request, latent_shape).to(self.device)
        memory = None if self.solver is None else self.solver.initial_state()
        if self.cache is not None:  # a request starts with nothing cached (round after round)
            self.cache.forget(request.request_id)
        return StepState(request.request_id, 0, noise, memory)

    def step(self, state: StepState, request: Request, out: torch.Tensor | None = None
             ) -> StepState:
        """Run step ``state.step_index`` for one request; ``out`` receives the new latent."""
        return self.step_batch([state], [request], out=out)[0]

    @torch.no_grad()
    def step_batch(self, states: Sequence[StepState], requests: Sequence[Request],
                   out: torch.Tensor | None = None) -> list[StepState]:
        """One forward over several requests, each at its own step (a stream batch); a single
        request goes through here too, so every layout runs the same code. Batching changes the
        GEMM shapes: equal to one-at-a-time ``step`` up to rounding (``BATCHED_TOL``), not bitwise.
        """
        self._check_steps(states)
        counts = [s.latent.shape[0] for s in states]
        idx = torch.tensor([s.step_index for s in states]).repeat_interleave(torch.tensor(counts))
        guided = torch.tensor([self.sampling.guided(int(i)) for i in idx], device=self.device)
        latent = states[0].latent if len(states) == 1 else torch.cat([s.latent for s in states])
        conds = [self.conditioning(r) for r in requests]
        nulls = None if conds[0].null_text is None else torch.cat([c.null_text for c in conds])
        cond = Conditioning(torch.cat([c.text for c in conds]), nulls,
                            *(batched(conds, name) for name in ("image", "channels")))
        expert = self._expert(states)
        if self.cache is not None:
            self.cache.begin([r.request_id for r in requests], states[0].step_index, expert)
        v = predict_velocity(self._forward_of(expert), latent,
                             self.timesteps[idx.to(self.device)], cond,
                             self.sampling.scale_of(expert), guided, self.cfg)
        return self.update(states, v, out=out)

    def _expert(self, states: Sequence[StepState]) -> int:
        """The one expert of a batch's steps (a stream batch across the boundary is refused:
        each expert runs its own forward with its own guidance)."""
        experts = {self.experts[s.step_index] for s in states}
        if len(experts) > 1:
            raise ValueError(f"a batch at steps {[s.step_index for s in states]} straddles the "
                             "expert boundary: batch each expert's steps on their own")
        return experts.pop()

    def _forward_of(self, expert: int) -> Callable[..., torch.Tensor]:
        if expert not in self.forwards:
            model_expert(self.model, expert)  # raises, naming what this rank holds
        return self.forwards[expert]

    @torch.no_grad()
    def update(self, states: Sequence[StepState], velocity: torch.Tensor,
               out: torch.Tensor | None = None) -> list[StepState]:
        """The solver step: each state's latent moved by its slice of ``velocity`` (rows in
        the order of ``states``) from its step to the next; ``out`` receives the new latents."""
        self._check_steps(states)
        counts = [s.latent.shape[0] for s in states]
        if self.solver is not None:
            new = [self.solver.update(s, v)
                   for s, v in zip(states, velocity.split(counts), strict=True)]
            if out is not None:  # the handoff frame: the solver's own tensors copied in
                torch.cat([s.latent for s in new], out=out)
                new = [replace(s, latent=x) for s, x in zip(new, out.split(counts), strict=True)]
            return new
        idx = torch.tensor([s.step_index for s in states]).repeat_interleave(torch.tensor(counts))
        idx = idx.to(self.device)
        latent = states[0].latent if len(states) == 1 else torch.cat([s.latent for s in states])
        latent = euler_update(latent, velocity, self.sigmas[idx], self.sigmas[idx + 1], out=out)
        return [replace(s, step_index=s.step_index + 1, latent=chunk)
                for s, chunk in zip(states, latent.split(counts), strict=True)]

    def _check_steps(self, states: Sequence[StepState]) -> None:
        for s in states:
            if not 0 <= s.step_index < self.sampling.num_steps:
                raise ValueError(f"request {s.request_id}: step_index={s.step_index} is outside "
                                 f"0..{self.sampling.num_steps - 1}")

    def run(self, states: Sequence[StepState], requests: Sequence[Request], steps: range,
            span: Callable[[int], AbstractContextManager] | None = None,
            out: torch.Tensor | None = None, on_step: Callable[[int], None] | None = None
            ) -> list[StepState]:
        """Run the contiguous ``steps`` (a stage's slice) for a group of requests, batched.
        ``span(i)`` times step i, ``on_step(i)`` reports it done; ``out`` receives the last step's
        latents, concatenated (a stage's outgoing frame, so the handoff copies nothing; a solver's
        new tensors are copied into it)."""
        for s in states:
            if s.step_index != steps.start:
                raise ValueError(f"request {s.request_id} arrived at step {s.step_index} but "
                                 f"this stage runs steps {steps.start}..{steps.stop - 1}")
        for i in steps:
            with span(i) if span is not None else nullcontext():
                states = self.step_batch(states, requests, out=out if i == steps.stop - 1 else None)
            if on_step is not None:
                on_step(i)
        return list(states)


def generate(model: torch.nn.Module, request: Request, *, preset: str | ModelPreset = "tiny",
             sampling: SamplingConfig | None = None, latent_shape: Sequence[int] | None = None
             ) -> torch.Tensor:
    """The single-device reference: all steps for one request on one device -> final latent."""
    return generate_batched(model, [request], preset=preset, sampling=sampling,
                            latent_shape=latent_shape)[0]


def generate_batched(model: torch.nn.Module, requests: Sequence[Request], *,
                     preset: str | ModelPreset = "tiny", sampling: SamplingConfig | None = None,
                     latent_shape: Sequence[int] | None = None) -> list[torch.Tensor]:
    """All requests as one batch through every step: the *batched* single-device baseline."""
    sampling = sampling or SamplingConfig()
    den = Denoiser(model, preset, sampling)
    shape = tuple(latent_shape or den.preset.latent_shape)
    states = den.run([den.initial_state(r, shape) for r in requests], requests,
                     range(sampling.num_steps))
    return [s.latent for s in states]


def measure_step_costs(model: torch.nn.Module, preset: str | ModelPreset, sampling: SamplingConfig,
                       latent_shape: Sequence[int] | None = None, repeats: int = 3,
                       timer: Callable[[], AbstractContextManager] | None = None) -> list[float]:
    """Median seconds of each step for one request on this device: weights for a cost-balanced
    ``split_steps(..., weights=...)``. Measured, not assumed: a guided step's batch of 2 costs
    less than two forwards, so "2 units" would overweight it. ``timer()`` times one step: a context
    manager whose value holds ``seconds`` once it exits, e.g.
    ``partial(ppdit.runtime.observe.timing.timed, placement)`` (this layer cannot import it).
    Without one the model must be on the CPU: on a GPU a clock reads only the launches."""
    if timer is None:
        timer = _cpu_clock
        param = next(model.parameters(), None)
        if param is not None and param.device.type != "cpu":
            raise ValueError(f"measure_step_costs: the model is on {param.device}; pass "
                             "timer=partial(ppdit.runtime.observe.timing.timed, placement), so the "
                             "steps' kernels are timed rather than their launch")
    den = Denoiser(model, preset, sampling)
    request = Request(-1, 0)
    shape = tuple(latent_shape or den.preset.latent_shape)
    times: list[list[float]] = [[] for _ in range(sampling.num_steps)]
    for _ in range(repeats + 1):  # the first pass is a warm-up
        state = den.initial_state(request, shape)
        for i in range(sampling.num_steps):
            with timer() as t:
                state = den.step(state, request)
            times[i].append(t.seconds)
    return [statistics.median(t[1:]) for t in times]


@dataclass
class _Seconds:
    seconds: float = float("nan")


@contextmanager
def _cpu_clock() -> Iterator[_Seconds]:
    """``measure_step_costs``' timer for a model on the CPU (``runtime.observe.timing.timed``'s CPU
    side: work on the CPU is done when the call returns)."""
    out, begin = _Seconds(), time.perf_counter()
    yield out
    out.seconds = time.perf_counter() - begin
