"""``ppdit`` on the command line: ``demo`` runs the main job and writes its artifacts.

    python -m ppdit demo                        # the streaming system: rank 0 + a 2-rank TP mesh
    python -m ppdit step-split                  # lessons 01-02: step-split PP with filling
    torchrun --nproc-per-node 3 -m ppdit demo   # ranks started by torchrun (GPUs: NCCL)
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from ppdit.runtime.launch import in_torchrun

DEFAULT_OUT = Path("out/demo")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m ppdit`` and the ``ppdit`` console script."""
    parser = argparse.ArgumentParser(prog="ppdit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the streaming system (controller + TP mesh); writes a "
                                       "video, a timeline, a trace and a summary")
    demo.add_argument("--out", type=Path, default=DEFAULT_OUT, help="artifact folder")
    demo.add_argument("--chunks", type=int, default=6, help="chunks to stream (across the cut)")
    demo.add_argument("--cut-at", type=int, default=3, help="hard cut before this chunk (-1: none)")
    demo.add_argument("--tp", type=int, default=2, help="mesh ranks (tensor parallel degree)")
    demo.add_argument("--steps", type=int, default=4, help="denoising steps per chunk")
    step = sub.add_parser("step-split", help="step-split PP with pipeline filling (lesson 01)")
    step.add_argument("--out", type=Path, default=Path("out/step_split"), help="artifact folder")
    step.add_argument("--stages", type=int, default=2, help="pipeline stages (ranks)")
    step.add_argument("--requests", type=int, default=8, help="requests to generate")
    step.add_argument("--steps", type=int, default=28, help="denoising steps per request")
    step.add_argument("--preset", default="tiny", help="model preset (tiny, small, ...)")
    step.add_argument("--mode", default="filled", choices=["filled", "stream_batch"])
    sub.add_parser("info", help="devices, backend and a 2-rank hello: a setup check")
    args = parser.parse_args(argv)
    if args.command == "info":
        return _info()
    if args.command == "demo":
        from ppdit.serve.demo import run_demo

        return run_demo(args.out, chunks=args.chunks,
                        cut_at=None if args.cut_at < 0 else args.cut_at, tp=args.tp,
                        num_steps=args.steps)
    return _demo(args)


def _info() -> int:
    from ppdit.runtime import launch
    from ppdit.runtime.probes import hello

    for row in launch(hello, 2, timeout_s=120):
        print(row)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from ppdit.parallel.step_split import StepSplitResult, make_plan
    from ppdit.sampler import SamplingConfig

    plan = make_plan(args.stages, args.requests, sampling=SamplingConfig(num_steps=args.steps),
                     preset=args.preset, mode=args.mode)
    if in_torchrun():
        result = _demo_under_torchrun(plan)
        if result is None:  # not rank 0
            return 0
    else:
        result = _demo_spawned(plan)
    assert isinstance(result, StepSplitResult)
    _write_artifacts(result, args.out)
    return 0


def _demo_spawned(plan):
    from tqdm import tqdm

    from ppdit.parallel.step_split import run_step_split

    print(f"ppdit demo: {len(plan.requests)} requests x {plan.sampling.num_steps} steps of the "
          f"{plan.preset!r} Wan DiT over {plan.num_stages} step-split stages "
          f"({plan.mode}); spawning {plan.world_size} ranks...", flush=True)
    with tqdm(total=len(plan.requests), unit="req", desc="generated") as bar:
        return run_step_split(plan, on_event=lambda rank, event: bar.update(1), timeout_s=1800)


def _demo_under_torchrun(plan):
    from ppdit.parallel.step_split import StepSplitResult
    from ppdit.parallel.step_stage import setup_stage, step_split_worker
    from ppdit.runtime.launch import run_under_torchrun
    from ppdit.runtime.trace import merge

    per_rank = run_under_torchrun(step_split_worker, args=((plan,), 1), setup=setup_stage)
    if per_rank is None:
        return None
    latents = {k: v for r in per_rank for k, v in r[0].latents.items()}
    return StepSplitResult(plan, dict(sorted(latents.items())),
                           [merge([r[0].traces[0] for r in per_rank])])


def _write_artifacts(result, out: Path) -> None:
    """timeline.png, trace.json (Perfetto), summary.json; then say where they are."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ppdit.analysis.trace_stats import summary
    from ppdit.viz import plot_busy, plot_timeline

    out.mkdir(parents=True, exist_ok=True)
    plan, trace = result.plan, result.trace
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 1.2 + 0.5 * len(trace.ranks)),
                                 gridspec_kw={"width_ratios": [5, 1]})
    plot_timeline(trace, ax=ax, title=f"step-split PP, {plan.num_stages} stages, "
                                       f"{len(plan.requests)} requests ({plan.mode})")
    plot_busy(trace, ax=bx)
    fig.tight_layout()
    fig.savefig(out / "timeline.png", dpi=110)
    trace.save_chrome(out / "trace.json")
    info = summary(trace, len(plan.requests))
    info["config"] = _jsonable({**asdict(plan), "requests": len(plan.requests)})
    (out / "summary.json").write_text(json.dumps(info, indent=2))
    busy = ", ".join(f"rank {r}: {v:.0%}" for r, v in info["busy_fraction"].items())
    print(f"\n{info['requests_per_s']:.2f} requests/s over {info['makespan_s']:.2f} s; "
          f"busy {busy}; median handoff {info['handoff_ms_median'] or 0:.2f} ms")
    print(f"wrote {out / 'timeline.png'}, {out / 'trace.json'} (open in https://ui.perfetto.dev)"
          f" and {out / 'summary.json'}")


def _jsonable(obj):
    """Plan fields as JSON: ranges as [start, stop], dataclasses already dicts via asdict."""
    if isinstance(obj, range):
        return [obj.start, obj.stop]
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj if isinstance(obj, (int, float, str, bool, type(None))) else str(obj)


if __name__ == "__main__":
    sys.exit(main())
