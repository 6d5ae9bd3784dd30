"""A pipeline folder's scheduler as the ``Denoiser``'s update, with its state made explicit.

``UniPCMultistepScheduler`` (what Wan 2.1 ships) is a *multistep* predictor-corrector: step i
corrects with the model output of step i - 1 and predicts with the last ``solver_order`` ones.
diffusers keeps that memory in one Python object, which cannot cross a step-split handoff, so
``SchedulerSolver`` keeps it in ``StepState.solver_state``::

    solver_state = {"step_index": i,              # where in the timestep list we are
                    "lower_order_nums": k,        # warm-up counter: order grows 1 -> 2
                    "this_order": o,              # order used by the last predictor
                    "model_outputs": [x0_{i-2}, x0_{i-1}],   # converted outputs, latent-sized
                    "timestep_list": [t_{i-2}, t_{i-1}],
                    "last_sample": x_{i-1}}       # the corrector's input, latent-sized

and loads it into one scheduler before each ``step``, reading it back after: diffusers' own
arithmetic (``tests/unit/test_t2v.py`` checks it bit for bit), as a value a stage can send. For
order 2 that is three latents beside the latent (``state_nbytes``): 4x Euler's handoff. On the
wire (``to_wire`` / ``from_wire``): ``wire_tensors`` latent-sized slots (an absent one travels
as zeros with a flag) and a few integers; every rank rebuilds the timestep list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from ppdit.cache import BlockCache
from ppdit.sampler import Denoiser, SamplingConfig, StepState, expert_steps

# Which attributes of each scheduler class change from step to step (besides ``_step_index``).
STATE_ATTRS = {
    "UniPCMultistepScheduler": ("lower_order_nums", "this_order", "model_outputs",
                                "timestep_list", "last_sample"),
    "FlowMatchEulerDiscreteScheduler": (),  # one-step: only the index moves
}
INT_KEYS = ("step_index", "lower_order_nums", "this_order")
LIST_KEYS = ("model_outputs", "timestep_list")
SOLVERS = ("folder", "euler")


class SchedulerSolver:
    """Runs ``scheduler.step`` for ``StepState``s whose solver memory travels with them.

    ``scheduler`` is the folder's scheduler (a fresh copy is configured here, so the caller's
    object is untouched); every rank that builds it from the same config and ``num_steps`` has
    the same timesteps and sigmas, so only the mutable state must be sent.
    """

    def __init__(self, scheduler, num_steps: int):
        name = type(scheduler).__name__
        if name not in STATE_ATTRS:
            raise ValueError(f"scheduler {name} is not supported: ppdit drives "
                             f"{sorted(STATE_ATTRS)} (their step state is known)")
        self.scheduler = type(scheduler).from_config(scheduler.config)
        self.scheduler.set_timesteps(num_steps, device="cpu")
        self.scheduler.set_begin_index(0)  # as WanPipeline: no timestep lookup per step
        self.attrs = STATE_ATTRS[name]
        self.timesteps = self.scheduler.timesteps
        self.num_steps = num_steps

    def initial_state(self) -> dict:
        """The state before step 0, read from a freshly configured scheduler."""
        fresh = type(self.scheduler).from_config(self.scheduler.config)
        fresh.set_timesteps(self.num_steps, device="cpu")
        return {"step_index": 0, **{a: _copy(getattr(fresh, a, None)) for a in self.attrs}}

    @torch.no_grad()
    def update(self, state: StepState, velocity: torch.Tensor) -> StepState:
        """One ``scheduler.step`` from ``state`` (its latent and solver memory)."""
        solver_state = state.solver_state or self.initial_state()
        if solver_state["step_index"] != state.step_index:
            raise ValueError(f"request {state.request_id}: solver state is at step "
                             f"{solver_state['step_index']} but the latent at {state.step_index}")
        s = self.scheduler
        s._step_index = state.step_index
        for a in self.attrs:
            setattr(s, a, _copy(solver_state[a]))
        t = self.timesteps[state.step_index]
        latent = s.step(velocity, t, state.latent, return_dict=False)[0]
        new = {"step_index": state.step_index + 1, **{a: _copy(getattr(s, a)) for a in self.attrs}}
        return replace(state, step_index=state.step_index + 1, latent=latent, solver_state=new)

    # -- the memory as a handoff carries it ------------------------------------------------------

    @property
    def wire_tensors(self) -> int:
        """Latent-sized tensors of the memory (UniPC of order 2: two model outputs and the
        last sample; flow-match Euler: none)."""
        return len(self._tensor_slots())

    def slot_names(self) -> list[str]:
        """The wire's tensor slots by name (``model_outputs.0``, ..., ``last_sample``), as
        ``state_tensors`` names them."""
        return [a if j is None else f"{a}.{j}" for a, j in self._tensor_slots()]

    def _tensor_slots(self) -> list[tuple[str, int | None]]:
        """(attribute, list index or None) of every tensor slot, in wire order."""
        template = self.initial_state()
        return [(a, j) for a in self.attrs if a in LIST_KEYS and a != "timestep_list"
                for j in range(len(template[a]))] + \
               [(a, None) for a in self.attrs if a not in LIST_KEYS and a not in INT_KEYS]

    def to_wire(self, memory: dict) -> tuple[list[torch.Tensor | None], list[int]]:
        """(tensor slots, integers) of a memory: None for an absent tensor, -1 for an absent
        counter; the step index travels with the latent."""
        tensors = [memory[a] if j is None else memory[a][j] for a, j in self._tensor_slots()]
        ints = [-1 if memory.get(k) is None else int(memory[k]) for k in self._int_keys()]
        return tensors, ints

    def from_wire(self, step_index: int, tensors: list[torch.Tensor | None], ints: list[int]
                  ) -> dict:
        """The memory ``to_wire`` described, at ``step_index``; the timestep list is rebuilt
        from the schedule (the scheduler stored ``timesteps[i]`` of the last steps)."""
        memory = self.initial_state()
        memory["step_index"] = step_index
        for (a, j), t in zip(self._tensor_slots(), tensors, strict=True):
            if j is None:
                memory[a] = t
            else:
                memory[a][j] = t
        for k, v in zip(self._int_keys(), ints, strict=True):
            memory[k] = None if v < 0 else v
        if "timestep_list" in memory:
            n = len(memory["timestep_list"])
            memory["timestep_list"] = [self.timesteps[i] if i >= 0 else None
                                       for i in range(step_index - n, step_index)]
        return memory

    def _int_keys(self) -> list[str]:
        return [k for k in INT_KEYS if k != "step_index" and k in self.attrs]


def _copy(value):
    """Lists are copied (the scheduler shifts them in place); tensors are never written in
    place by ``step``, so sharing them is safe."""
    return list(value) if isinstance(value, list) else value


def state_tensors(state: dict | None) -> dict[str, torch.Tensor]:
    """The tensors a handoff must carry for ``state``, by name (``model_outputs.0`` ...)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in (state or {}).items():
        items = value if isinstance(value, list) else [value]
        for j, v in enumerate(items):
            if isinstance(v, torch.Tensor) and v.numel() > 1:
                out[f"{key}.{j}" if isinstance(value, list) else key] = v
    return out


def state_nbytes(state: StepState) -> dict[str, int]:
    """Bytes of a step-split handoff: the latent, and each tensor of the solver state."""
    sizes = {"latent": state.latent.numel() * state.latent.element_size()}
    sizes.update({k: v.numel() * v.element_size() for k, v in state_tensors(
        state.solver_state).items()})
    return sizes


def folder_sampling(scheduler, num_steps: int, guidance_scale: float, *,
                    boundary_ratio: float | None = None,
                    guidance_scale_2: float | None = None) -> SamplingConfig:
    """The sampling a folder runs with: its flow shift, guidance as ``WanPipeline`` decides it
    (on only when the scale is above 1), and a Wan 2.2 folder's expert boundary, a timestep
    (``boundary_ratio x num_train_timesteps``), with the second expert's scale."""
    shift = float(scheduler.config.get("flow_shift", None) or scheduler.config.get("shift", 3.0))
    boundary = None if boundary_ratio is None else \
        boundary_ratio * scheduler.config.get("num_train_timesteps", 1000)
    return SamplingConfig(num_steps=num_steps, shift=shift,
                          guidance_scale=guidance_scale if guidance_scale > 1.0 else 1.0,
                          boundary=boundary, guidance_scale_2=guidance_scale_2)


def step_experts(plan) -> list[int]:
    """Which expert runs each of a plan's steps, on its solver's timesteps (``expert_steps``)."""
    n = plan.sampling.num_steps
    times = (SchedulerSolver(plan.source.scheduler(), n).timesteps if plan.solver == "folder"
             else plan.sampling.timesteps())
    return expert_steps(times.tolist(), plan.sampling.boundary)


def plan_denoiser(model: torch.nn.Module, plan, forward: Callable[..., torch.Tensor] | None = None,
                  cfg=None, cache=None) -> Denoiser:
    """The ``Denoiser`` of any layout's plan (its ``source``, ``sampling``, ``solver``, ``cfg``,
    ``requests``, ``prompts`` and ``cache``): the one loop, set up the same way on every rank.
    Given prompts (a folder's embeddings, one per request) replace the seeded stand-ins; ``cfg``
    (a CFG-parallel policy) replaces the plan's way of running the two halves; ``cache`` (a
    ``cache.BlockCache`` the ``forward`` already uses) the plan's own."""
    solver = (SchedulerSolver(plan.source.scheduler(), plan.sampling.num_steps)
              if plan.solver == "folder" else None)
    if cache is None and getattr(plan, "cache", None) is not None:
        cache = BlockCache(plan.cache)
    den = Denoiser(model, plan.source.spec, plan.sampling, forward=forward, solver=solver,
                   cfg=cfg or plan.cfg, cache=cache)
    for request, cond in zip(plan.requests, plan.prompts or (), strict=False):
        den.condition_on(request, cond.text, cond.null_text, cond.image, cond.channels)
    return den


def check_solver(solver: str, source) -> None:
    """``"folder"`` needs a folder to take the scheduler from."""
    if solver not in SOLVERS:
        raise ValueError(f"solver={solver!r} is not one of {SOLVERS}")
    if solver == "folder" and source.folder is None:
        raise ValueError(f"solver='folder' runs a pipeline folder's scheduler, but the model "
                         f"source is the preset {source.preset!r} (use solver='euler')")


def make_denoiser(model: torch.nn.Module, scheduler, num_steps: int, guidance_scale: float, *,
                  forward: Callable[..., torch.Tensor] | None = None, solver: str = "folder",
                  cfg: str = "split") -> Denoiser:
    """A ``Denoiser`` whose update is ``scheduler.step`` (``solver="folder"``), or ppdit's
    Euler on the same flow shift (``solver="euler"``: the teaching baseline). Guidance as
    ``WanPipeline`` decides it (on when > 1) and computes it (``cfg="split"``)."""
    if solver not in SOLVERS:
        raise ValueError(f"solver={solver!r} is not one of {SOLVERS} (the pipeline's scheduler, "
                         "or ppdit's Euler)")
    sampling = folder_sampling(scheduler, num_steps, guidance_scale)
    step = SchedulerSolver(scheduler, num_steps) if solver == "folder" else None
    return Denoiser(model, None, sampling, forward=forward, solver=step, cfg=cfg)
