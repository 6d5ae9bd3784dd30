"""What ranks cost on this machine: starting them, and a denoising step of each layout at 2 ranks.

Both use the launcher's default placement, as a user's first run would: on a machine with one
GPU the two ranks share it (or stay on the CPU, if that is what the placement rule decides);
which devices they got is recorded beside the numbers.

Per-layout step times are small and short on purpose (the ``small`` preset, a few requests and
steps): they show that every layout runs here and what its machinery costs next to one device,
in the same launch, interleaved round by round (``ppdit.runtime.rounds``). They are not the
480p figures; those are ``forwards``.
"""

from __future__ import annotations

import statistics
import traceback

from ppdit.analysis.layout_compare import RING, VARIANTS, LayoutCompare, run_compare
from ppdit.checkpoint.source import ModelSource
from ppdit.gpu_check.sections import first_line, sig
from ppdit.parallel.layer_split.run import run_layer_splits
from ppdit.parallel.layer_split.schedule import LayerSplitPlan
from ppdit.parallel.step_split.plan import make_plan
from ppdit.parallel.step_split.run import run_step_splits
from ppdit.runtime.observe.timing import MIN_ROUNDS, timed
from ppdit.runtime.processes.hello import hello
from ppdit.runtime.processes.launch import launch
from ppdit.runtime.processes.pool import ranks
from ppdit.sampler import Request, SamplingConfig

WORLD = 2
PRESET = "small"  # a few ms per step on a GPU: the layouts' own costs stay visible
REQUESTS, STEPS, ROUNDS = 4, 8, MIN_ROUNDS
TIMEOUT_S = 300  # per job: far above what these take, low enough to end a hang in the budget


def launch_cost(world_size: int = WORLD, fresh_calls: int = MIN_ROUNDS,
                pool_jobs: int = 5) -> dict:
    """Seconds of ``launch(hello, n)`` on fresh ranks vs the same job on a live pool, on this
    process's CPU clock (``timed(None)``): the ranks' work is done once their results are back."""
    fresh = []
    for _ in range(fresh_calls):
        with timed() as t:
            rows = launch(hello, world_size, timeout_s=TIMEOUT_S, echo=False)
        fresh.append(t.seconds)
    jobs = []
    with ranks(world_size, timeout_s=TIMEOUT_S, echo=False) as pool:
        for _ in range(1 + pool_jobs):  # the first job also starts the pool's ranks
            with timed() as t:
                pool.run(hello)
            jobs.append(t.seconds)
    pool_start, jobs = jobs[0], jobs[1:]
    return {"world_size": world_size, "devices": [r["device"] for r in rows],
            "fresh_s": sig(statistics.median(fresh), 3),
            "fresh_s_range": [sig(min(fresh), 3), sig(max(fresh), 3)],
            "pool_start_s": sig(pool_start, 3), "pool_job_s": sig(statistics.median(jobs), 3)}


def layout_step_times() -> dict:
    """ms per denoising step (or forward) of each layout at 2 ranks, with its one-device run
    from the same launch. A layout that fails leaves a reason and the others still run."""
    rows, failed = [], []
    with ranks(WORLD, timeout_s=TIMEOUT_S, echo=False) as pool:
        where = pool.run(hello)
        for name, measure in (("step split", _step_split), ("layer split", _layer_split),
                              ("TP and SP", _tp_sp)):
            try:
                rows += measure(pool)
            except Exception as err:  # recorded; the pool restarts its ranks for the next
                traceback.print_exc()
                failed.append(f"{name}: {type(err).__name__}: {first_line(err)}")
    devices = [r["device"] for r in where]
    shared = time_sliced(devices)
    if shared:  # what the rows measure is not scaling: say so on every row
        rows = [{**r, "layout": f"{r['layout']} {shared}"} for r in rows]
    out = {"world_size": WORLD, "devices": devices, "backend": where[0]["backend"], "rows": rows}
    if failed:
        out.update(status="partial" if rows else "error", reason="; ".join(failed))
    return out


def time_sliced(devices: list[str]) -> str:
    """The label of rows measured with ranks that share a device ("" when each has its own):
    two ranks on one GPU take turns on it, so a "speedup" there measures time-slicing (and the
    layout's overheads), not what the layout gains on two GPUs."""
    on_gpu = [d for d in devices if d.startswith("cuda")]
    if len(set(on_gpu)) >= len(devices):
        return ""
    where = "one GPU" if len(set(on_gpu)) == 1 else "the CPU" if not on_gpu else "shared GPUs"
    return f"(time-sliced: {len(devices)} ranks on {where})"


def _row(layout: str, per: str, ms: float, one_device_ms: float) -> dict:
    return {"layout": layout, "per": per, "preset": PRESET, "ms": sig(ms),
            "one_device_ms": sig(one_device_ms), "speedup": sig(one_device_ms / ms, 3)}


def _step_split(pool) -> list[dict]:
    sampling, source = SamplingConfig(num_steps=STEPS), ModelSource(PRESET)
    return _split_row(f"step split P=2, {REQUESTS} requests filled", run_step_splits, pool, {
        "one": make_plan(1, REQUESTS, sampling=sampling, source=source),
        "p2": make_plan(2, REQUESTS, sampling=sampling, source=source)})


def _layer_split(pool) -> list[dict]:
    reqs = tuple(Request(i, i) for i in range(REQUESTS))
    sampling, source = SamplingConfig(num_steps=STEPS), ModelSource(PRESET)
    return _split_row(f"layer split P=2, M={REQUESTS}, wrap", run_layer_splits, pool, {
        "one": LayerSplitPlan(reqs, 1, REQUESTS, sampling=sampling, source=source),
        "p2": LayerSplitPlan(reqs, 2, REQUESTS, wrap=True, sampling=sampling, source=source)})


def _split_row(layout: str, run, pool, plans: dict) -> list[dict]:
    """The split on one device ("one") and on 2 ranks ("p2"), one launch: ms per request-step."""
    res = run(plans, rounds=ROUNDS, pool=pool, echo=False, timeout_s=TIMEOUT_S)
    ms = {k: statistics.median(v.makespans_s) / (REQUESTS * STEPS) * 1e3 for k, v in res.items()}
    return [_row(layout, "request-step", ms["p2"], ms["one"])]


def _tp_sp(pool) -> list[dict]:
    spec = LayoutCompare(source=ModelSource(PRESET), rounds=ROUNDS, variants=(*VARIANTS, RING))
    res = run_compare(spec, WORLD, pool=pool, echo=False, timeout_s=TIMEOUT_S)
    one = res.seconds["one device"] * 1e3
    names = {"TP": "TP=2", "SP, V-first": "SP (Ulysses, V-first)",
             "SP, V last": "SP (Ulysses, V last)", RING: "SP (ring attention)"}
    return [_row(f"{label}, latent {spec.latent_shape}", "forward", res.seconds[v] * 1e3, one)
            for v, label in names.items()]
