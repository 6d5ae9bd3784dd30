"""A pipeline folder's scheduler as the ``Denoiser``'s update, with its state made explicit.

Euler needs nothing from earlier steps but the latent. ``UniPCMultistepScheduler`` (what Wan
2.1 ships) is a *multistep* predictor-corrector: step i corrects the sample with the model
output of step i - 1 and predicts with the outputs of the last ``solver_order`` steps. A diffusers
scheduler keeps that memory in attributes of one Python object, which cannot cross a step-split
handoff. ``SchedulerSolver`` therefore keeps it in ``StepState.solver_state`` instead::

    solver_state = {"step_index": i,              # where in the timestep list we are
                    "lower_order_nums": k,        # warm-up counter: order grows 1 -> 2
                    "this_order": o,              # order used by the last predictor
                    "model_outputs": [x0_{i-2}, x0_{i-1}],   # converted outputs, latent-sized
                    "timestep_list": [t_{i-2}, t_{i-1}],
                    "last_sample": x_{i-1}}       # the corrector's input, latent-sized

and loads it into one scheduler object before each ``step`` and reads it back after: the same
arithmetic as diffusers' own loop (``tests/test_pipeline.py`` checks it bit for bit), but the
state is a value a stage can send. For UniPC of order 2 it is three latents beside the latent
itself (``state_nbytes``): the handoff grows 4x compared with Euler's.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ppdit.runtime.p2p import recv_tensor, send_tensor
from ppdit.sampler import StepState

# Which attributes of each scheduler class change from step to step (besides ``_step_index``).
STATE_ATTRS = {
    "UniPCMultistepScheduler": ("lower_order_nums", "this_order", "model_outputs",
                                "timestep_list", "last_sample"),
    "FlowMatchEulerDiscreteScheduler": (),  # one-step: only the index moves
}
INT_KEYS = ("step_index", "lower_order_nums", "this_order")
LIST_KEYS = ("model_outputs", "timestep_list")


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


# -- the handoff on the wire: counters in one int64 tensor, then each latent-sized tensor -------


def send_state(state: StepState, dst: int, **wire) -> None:
    """Send a ``StepState`` with its solver memory to rank ``dst`` (see ``recv_state``).

    Frame: ``[request_id, step_index, n_keys, then per solver key: kind, value]`` where a list
    entry or an optional tensor that is None is sent as kind 0, a tensor as kind 1 (its payload
    follows as its own message), a scalar as kind 2 with its value (timesteps are small
    integers or floats x 1000: sent as float64, exact for both).
    """
    solver = state.solver_state or {}
    keys, tensors = [], []
    for key in sorted(solver):
        items = solver[key] if key in LIST_KEYS else [solver[key]]
        for v in items:
            if v is None:
                keys += [0.0, 0.0]
            elif isinstance(v, torch.Tensor) and v.numel() > 1:
                keys += [1.0, 0.0]
                tensors.append(v)
            else:
                keys += [2.0, float(v)]
    head = torch.tensor([state.request_id, state.step_index, len(solver) > 0, *keys],
                        dtype=torch.float64)
    send_tensor(head, dst, **wire)
    send_tensor(state.latent, dst, **wire)
    for t in tensors:
        send_tensor(t, dst, **wire)


def recv_state(src: int, template: dict | None, timesteps: torch.Tensor,
               **wire) -> StepState:
    """Receive what ``send_state`` sent; ``template`` (the solver's ``initial_state``) gives
    the keys, list lengths and types to rebuild."""
    head = recv_tensor(src, **wire).tolist()
    request_id, step_index, has_solver, keys = int(head[0]), int(head[1]), head[2], head[3:]
    latent = recv_tensor(src, **wire)
    if not has_solver:
        return StepState(request_id, step_index, latent)
    solver, pos = {}, 0
    for key in sorted(template):
        n = len(template[key]) if key in LIST_KEYS else 1
        items = []
        for _ in range(n):
            kind, value = keys[pos], keys[pos + 1]
            pos += 2
            items.append(None if kind == 0 else recv_tensor(src, **wire) if kind == 1
                         else _scalar(key, value, timesteps))
        solver[key] = items if key in LIST_KEYS else items[0]
    return StepState(request_id, step_index, latent, solver)


def _scalar(key: str, value: float, timesteps: torch.Tensor):
    """Rebuild a scalar with the type the scheduler stored: ints for counters, a 0-d tensor of
    the schedule's dtype for a timestep."""
    if key in INT_KEYS:
        return int(value)
    return torch.tensor(value, dtype=torch.float64).to(timesteps.dtype)


__all__ = ["STATE_ATTRS", "SchedulerSolver", "recv_state", "send_state", "state_nbytes",
           "state_tensors"]
