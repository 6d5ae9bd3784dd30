"""Layer split from the caller's side: plans side by side, the single-device reference."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch

from ppdit.checkpoint.solver import plan_denoiser
from ppdit.parallel.layer_split.ranks import LayerStageRunner, micro_text, update_request
from ppdit.parallel.layer_split.schedule import LayerSplitPlan
from ppdit.runtime.observe.trace import Rounds, Trace
from ppdit.runtime.rounds import run_side_by_side

ENGINES = ("ppdit", "torch")


@dataclass
class LayerSplitResult(Rounds):
    """Final latents, one merged timeline per round, and each rank's parameter count."""

    plan: LayerSplitPlan
    latents: dict[int, torch.Tensor]
    traces: list[Trace]
    params_per_rank: list[int] = field(default_factory=list)

    @property
    def makespans_s(self) -> list[float]:
        """Compute window of each round (first compute start to last compute end), seconds."""
        return [(max(s.end_ns for s in spans) - min(s.start_ns for s in spans)) / 1e9
                for spans in (t.select("compute") for t in self.traces)]

    def throughput(self) -> float:
        """Requests per second, median round."""
        return len(self.plan.requests) / statistics.median(self.makespans_s)


def run_layer_split(plan: LayerSplitPlan, rounds: int = 1,
                    **launch_kwargs) -> LayerSplitResult | None:
    """Launch ``plan.num_stages`` ranks and run the plan (``None`` on other torchrun ranks)."""
    out = run_layer_splits({"plan": plan}, rounds, **launch_kwargs)
    return None if out is None else out["plan"]


def run_layer_splits(plans: dict[str, LayerSplitPlan], rounds: int = 1,
                     engines: dict[str, str] | None = None,
                     **launch_kwargs) -> dict[str, LayerSplitResult] | None:
    """Several plans in one launch, interleaved round by round, so they can be compared.

    ``engines`` may name plans to run with ``torch.distributed.pipelining`` ("torch") instead
    of ppdit's executor, on the same stage models."""
    engines = engines or {}
    if set(engines.values()) - set(ENGINES):
        raise ValueError(f"engines {engines} must each be one of {ENGINES}")
    jobs = {name: (plan, engines.get(name, "ppdit")) for name, plan in plans.items()}
    world = max(p.num_stages for p in plans.values())
    runs = run_side_by_side(jobs, runner=LayerStageRunner, world_size=world, rounds=rounds,
                            **launch_kwargs)
    if runs is None:
        return None
    out = {}
    for name, plan in plans.items():
        r = runs[name]
        latents = {k: v for got in r.last().values() for k, v in got.items()}
        out[name] = LayerSplitResult(plan, dict(sorted(latents.items())), r.traces,
                                     [r.results[rank] for rank in sorted(r.results)])
    return out


def layer_split_reference(model, plan: LayerSplitPlan) -> dict[int, torch.Tensor]:
    """The plan's arithmetic on one device: the same micro-batches, the same updates.

    Equal to ``run_layer_split`` bit for bit. Equal to per-request ``generate`` bit for bit when
    every micro-batch is one request without guidance; otherwise the batch shapes differ and
    only rounding separates them."""
    den = plan_denoiser(model, plan)
    states = [den.initial_state(r, plan.shape) for r in plan.requests]
    for step in range(plan.sampling.num_steps):
        velocity: dict[tuple[int, int], torch.Tensor] = {}
        for m in range(plan.micro_batches):
            samples = plan.micro_samples(m)
            x = torch.stack([states[q.request].latent[0] for q in samples])
            t = den.timesteps[step].expand(len(samples))
            with torch.no_grad():
                v = den.forwards[0](x, t, micro_text(den, plan, samples))
            velocity.update({(q.request, q.half): row
                             for q, row in zip(samples, v.split(1), strict=True)})
        states = [update_request(den, plan, s, velocity) for s in states]
    return {s.request_id: s.latent for s in states}
