"""Step caching, a policy of the one sampling loop: skip most blocks on steps where the model's
output would barely move.

First-Block-Cache (``"fbc"``; ParaAttention's, diffusers' ``FirstBlockCacheConfig``, whose
arithmetic this is, term for term): every forward runs the first block; if its residual (output
- input) moved by at most ``threshold`` against the residual of the last *computed* forward,
``mean |r - r_prev| / mean |r_prev|``, the other blocks are skipped and their last residual is
added back. MagCache (``"mag"``; diffusers' ``MagCacheConfig``, term for term) decides from a
calibrated schedule instead: each step's ratio of residual magnitudes (``mag_ratios``) is
multiplied up, and while the accumulated error ``sum |1 - prod ratio|`` stays within the
threshold (at most ``max_skip_steps`` in a row, never in the first ``retention_ratio`` of the
steps) the whole stack is skipped and its last residual added to the input. Published speedups
on Wan 2.1 are 1.85-2.68x (TeaCache, FBC, MagCache): late, low-noise steps change little.

Parallel, the decision must be one: under ring or Ulysses a rank holds a slice of the tokens,
so FBC's two sums are all-reduced over the sequence ranks (``reduce``) before the ratio
(MagCache's schedule is the same everywhere already), and every rank skips or computes
together (a rank that computed alone would wait in an all-to-all the others never start). TP
and CFG ranks hold whole hidden states: their decision is already one.

State: per request, expert and branch (the conditional and unconditional forwards of a guided
step: diffusers' cache contexts), the last computed first-block residual and the rest's
residual. A step-split handoff carries it to the next stage (``StepState.cache_state``), so
step split equals the cached single device; at Wan 1.3B's width it is D / 64 = 24 latents per
tensor, the price of a cache that crosses stages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ppdit.model import StageContext, run_blocks

KINDS = ("fbc", "mag")


@dataclass(frozen=True)
class CacheConfig:
    """A plan's step cache: kind and threshold, and MagCache's schedule (the same on every
    rank; picklable). ``mag_ratios``: one per step (MagCache's calibration of the model)."""

    threshold: float
    kind: str = "fbc"
    mag_ratios: tuple[float, ...] = ()
    max_skip_steps: int = 3
    retention_ratio: float = 0.2

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"cache kind={self.kind!r} is not one of {KINDS}")
        if self.kind == "mag" and not self.mag_ratios:
            raise ValueError("MagCache needs mag_ratios, one per step: the model's calibrated "
                             "residual magnitude ratios (diffusers' MagCacheConfig(calibrate=True)"
                             " prints them)")
        if self.threshold < 0:
            raise ValueError(f"cache threshold={self.threshold} must be >= 0 (0: skip only "
                             "where the first block's residual did not move at all)")


Key = tuple[int, int, int]  # (request id, expert, branch)


class BlockCache:
    """First-Block-Cache's state and decision for one rank's forwards (module docstring).

    The loop says which request, step and expert a forward serves (``begin``); the forwards of a
    step are its branches in call order (conditional, then unconditional: diffusers' contexts).
    ``reduce`` all-reduces a (2,) tensor of sums over the ranks holding other token slices."""

    def __init__(self, config: CacheConfig,
                 reduce: Callable[[torch.Tensor], torch.Tensor] | None = None):
        self.config, self.reduce = config, reduce
        self.states: dict[Key, tuple[torch.Tensor, torch.Tensor]] = {}  # (head, tail residual)
        self.acc: dict[Key, list[float]] = {}  # MagCache's accumulators
        self.requests: tuple[int, ...] = ()
        self.expert = self.calls = self.step = 0
        self.log: list[tuple[int, int, int, bool]] = []  # (request, step, branch, computed)

    def begin(self, requests: Sequence[int], step: int, expert: int = 0) -> None:
        """The next forwards serve ``requests`` (one: a batch has one decision) at ``step``."""
        if len(requests) != 1:
            raise ValueError(f"step caching decides per request: a batch of {len(requests)} "
                             "requests would share one decision (run micro_batch 1)")
        self.requests, self.step, self.expert, self.calls = tuple(requests), step, expert, 0

    def run(self, model, hidden: torch.Tensor, ctx: StageContext) -> torch.Tensor:
        """Every block, or the first and the others' cached residual: ``run_blocks``' result."""
        key = (self.requests[0], self.expert, self.calls)
        self.calls += 1
        if self.config.kind == "mag":
            return self._run_mag(key, model, hidden, ctx)
        head = model.blocks[0](hidden, ctx.text, ctx.timestep_proj, ctx.rotary_emb)
        residual = head - hidden
        state = self.states.get(key)
        compute = state is None or self._moved(residual, state[0])
        self.log.append((key[0], self.step, key[2], compute))
        if not compute:
            return state[1] + head
        out = run_blocks(model, head, ctx, range(1, len(model.blocks)))
        self.states[key] = (residual, out - head)
        return out

    def _run_mag(self, key: Key, model, hidden: torch.Tensor, ctx: StageContext
                 ) -> torch.Tensor:
        """MagCache: the state is the stack's last residual and the accumulated [ratio,
        error, steps] (Python floats, as diffusers keeps them; a handoff carries them in a
        tensor of the residual's shape: ``export``)."""
        c, state = self.config, self.states.get(key)
        acc = self.acc.get(key, [1.0, 0.0, 0.0])
        skip = False
        if self.step >= int(c.retention_ratio * len(c.mag_ratios) + 0.5):
            ratio = c.mag_ratios[self.step] if self.step < len(c.mag_ratios) else 1.0
            acc[0] *= ratio
            acc[1] += abs(1.0 - acc[0])
            acc[2] += 1
            skip = state is not None and acc[1] <= c.threshold and acc[2] <= c.max_skip_steps
            if not skip:
                acc = [1.0, 0.0, 0.0]
        self.log.append((key[0], self.step, key[2], not skip))
        self.acc[key] = acc
        if skip:
            return hidden + state[0]
        out = run_blocks(model, hidden, ctx)
        residual = out - hidden
        self.states[key] = (residual, residual)  # the second: a slot for the handoff's use
        return out

    def _moved(self, residual: torch.Tensor, prev: torch.Tensor) -> bool:
        """diffusers' test, ``diff > threshold``; over slices, the ratio of reduced sums (the
        token count cancels)."""
        if self.reduce is None:
            diff = (residual - prev).abs().mean() / prev.abs().mean()
        else:
            sums = self.reduce(torch.stack([(residual - prev).abs().sum(), prev.abs().sum()]))
            diff = sums[0] / sums[1]
        return diff.item() > self.config.threshold

    def export(self, request: int) -> dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]]:
        """A request's state, by (expert, branch), as a handoff carries it (and forget it):
        MagCache's accumulators ride in the first three values of the second tensor (fp32 in
        the frame: a decision at a stage boundary is diffusers' to fp32's rounding)."""
        out = {}
        for k in [k for k in self.states if k[0] == request]:
            first, second = self.states.pop(k)
            if k in self.acc:
                second = torch.zeros_like(first)
                second.view(-1)[:3] = torch.tensor(self.acc.pop(k), dtype=first.dtype)
            out[k[1:]] = (first, second)
        for k in [k for k in self.acc if k[0] == request]:
            del self.acc[k]
        return out

    def load(self, request: int, state: dict | None) -> None:
        """Take over a request's state from the stage before."""
        for (expert, branch), (first, second) in (state or {}).items():
            key = (request, expert, branch)
            self.states[key] = (first, second)
            if self.config.kind == "mag":
                self.acc[key] = second.view(-1)[:3].double().tolist()

    def forget(self, request: int) -> None:
        """A finished request's state goes."""
        self.export(request)
