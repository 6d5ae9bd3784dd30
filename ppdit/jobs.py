"""The command line's jobs: run something on ranks (spawned, or started by torchrun), then
write its artifacts and say where they are. ``cli.py`` only parses arguments.

Each job calls the same ``run_*`` entry point a notebook calls; under ``torchrun`` that call
gathers the results to rank 0 and returns ``None`` on the other ranks, which then simply exit.
Each job imports what it runs when it runs: diffusers and matplotlib cost seconds to import,
and a job needs only its own.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from ppdit._spawn_entry import in_torchrun

# The demo's default model: the tiny Wan pipeline trained on moving shapes (scripts/train_toy.py)
TOY_PROMPTS = ("a red ball moves right", "a blue square moves up")  # before / after the cut


def demo(out: Path, *, chunks: int | None = None, cut_at: int | None = -1, tp: int = 2,
         num_steps: int | None = None, dtype: str = "fp32", device: str | None = None,
         model: str = "toy", prompts: tuple[str, str] = TOY_PROMPTS,
         nccl_rules: bool | None = None) -> int:
    """The streaming system: rank 0 (controller + streaming VAE) and a TP mesh stream a video
    chunk by chunk with a hard cut; writes video.gif, video_strip.png (the toy model),
    timeline.png, trace.json, summary.json. ``model="toy"``: the trained toy pipeline, so the
    video shows the prompts; ``"random"``: the random-weight tiny preset (coloured noise; the
    lessons' shapes and timings). ``chunks`` and ``cut_at`` default to the model's
    (``cut_at=None``: no cut)."""
    from ppdit.checkpoint.source import ModelSource
    from ppdit.serve.config import BringupConfig
    from ppdit.serve.system import run_bringup

    # The toy model is trained on two-chunk clips (13 frames): 6 chunks with the cut before
    # the fifth deliver two chunks of each video (the two chunks in flight at the cut go stale).
    chunks = chunks or 6
    if cut_at == -1:
        cut_at = 4 if model == "toy" else 3
    cfg = BringupConfig(phase="pp1" if tp > 1 else "recompute", chunks=chunks, cut_at=cut_at,
                        tp=tp, num_steps=num_steps or 4, source=ModelSource(dtype=dtype))
    if model == "toy":
        from ppdit.toy.stream import stream_config

        cfg = stream_config(cfg, prompts, num_steps)
    elif model != "random":
        raise ValueError(f"model={model!r} is not one of ('toy', 'random')")
    if not in_torchrun():
        print(f"ppdit demo: streaming {chunks} chunks (hard cut before chunk {cut_at}) from a "
              f"{tp}-rank tensor-parallel mesh to a controller with a streaming VAE; spawning "
              f"{cfg.world_size} ranks...", flush=True)
    result = run_bringup(cfg, device=device, nccl_rules=nccl_rules)
    if result is not None:  # None: a torchrun rank other than 0
        _write_demo(result, out)
    return 0


def _write_demo(result, out: Path) -> None:
    import torch

    from ppdit.toy.detect import frame_colours, parse_prompt
    from ppdit.viz.artifacts import enlarge, save_gif, save_strip

    out.mkdir(parents=True, exist_ok=True)
    video, prompts = result.controller.video, result.cfg.prompts
    names, verdicts = ["video.gif"], []
    if prompts is not None:  # the toy model: 32 x 32 clips, enlarged; a frame strip
        clips = {v: torch.cat(video[v], dim=2)[0] for v in sorted(video)}
        save_strip(list(clips.values()), [f"video {v}: {prompts[v]!r}" for v in clips],
                   out / "video_strip.png")
        names.append("video_strip.png")
        video = {v: [enlarge(c) for c in chunks] for v, chunks in video.items()}
        # The toy detector's colour for every delivered frame, against the prompt
        # (ppdit.toy.detect): the first picture a newcomer sees must show what it says.
        for v, clip in clips.items():
            colours, wanted = frame_colours(clip), parse_prompt(prompts[v])[0]
            ok = all(c == wanted for c in colours)
            verdicts.append({"prompt": prompts[v], "frame_colours": colours,
                             "every_frame_is_the_prompts_colour": ok})
    summary = {**result.summary(), "frames_written": save_gif(video, out / "video.gif")}
    if prompts is not None:
        summary["videos"] = verdicts
    lines = [f"{summary['fps']:.1f} frames/s, first frame after "
             f"{summary['time_to_first_frame_s'] * 1e3:.0f} ms, {summary['chunks_delivered']} "
             f"chunks delivered, {summary['dropped_stale_results']} stale results dropped, "
             f"max queue depth {summary['max_queue_depth']}"]
    lines += [f"{v['prompt']!r}: the toy detector's colour per frame {v['frame_colours']}; "
              f"every frame the prompt's colour: {v['every_frame_is_the_prompts_colour']}"
              for v in verdicts]
    _write_run(out, result.trace, f"bring-up phase {result.cfg.phase}: rank 0 controller + "
               "decode, ranks 1.. the mesh", summary, lines, names)


def step_split(out: Path, *, stages: int = 2, requests: int = 8, num_steps: int = 28,
               preset: str = "tiny", mode: str = "filled", dtype: str = "fp32",
               device: str | None = None, nccl_rules: bool | None = None) -> int:
    """Lessons 01-02's pipeline: requests through step-split stages, with a progress bar;
    writes timeline.png, trace.json and summary.json."""
    from tqdm import tqdm

    from ppdit.checkpoint.source import ModelSource
    from ppdit.parallel.step_split.plan import make_plan
    from ppdit.parallel.step_split.run import run_step_split
    from ppdit.sampler import SamplingConfig

    plan = make_plan(stages, requests, sampling=SamplingConfig(num_steps=num_steps),
                     source=ModelSource(preset, dtype=dtype), mode=mode)
    if in_torchrun():
        result = run_step_split(plan, device=device, nccl_rules=nccl_rules)
    else:
        print(f"ppdit step-split: {requests} requests x {num_steps} steps of the {preset!r} Wan "
              f"DiT over {stages} step-split stages ({mode}); spawning {plan.world_size} "
              "ranks...", flush=True)
        with tqdm(total=requests, unit="req", desc="generated") as bar:
            result = run_step_split(plan, on_event=lambda rank, event: bar.update(1),
                                    timeout_s=1800, device=device, nccl_rules=nccl_rules)
    if result is not None:
        _write_step_split(result, out)
    return 0


def _write_step_split(result, out: Path) -> None:
    from ppdit.analysis.trace_stats import summary

    plan, trace = result.plan, result.trace
    info = summary(trace, len(plan.requests))
    info["config"] = {**asdict(plan), "requests": len(plan.requests)}
    busy = ", ".join(f"rank {r}: {v:.0%}" for r, v in info["busy_fraction"].items())
    line = (f"\n{info['requests_per_s']:.2f} requests/s over {info['makespan_s']:.2f} s; "
            f"busy {busy}; median handoff {info['handoff_ms_median'] or 0:.2f} ms")
    _write_run(out, trace, f"step-split PP, {plan.num_stages} stages, {len(plan.requests)} "
               f"requests ({plan.mode})", info, [line], busy=True)


def generate(spec, out: Path, device: str | None = None, streaming_decode: bool = False,
             nccl_rules: bool | None = None) -> int:
    """Prompt -> video from a local Wan pipeline folder with any layout, with a progress bar;
    writes video.mp4 (or .gif), frames.png, timeline.png, trace.json, summary.json. ``spec``:
    a ``GenerateSpec``, or what ``t2v.generate.prepare`` made of one (checked and planned)."""
    import time

    from tqdm import tqdm

    from ppdit.t2v.generate import generate as run_generate
    from ppdit.t2v.generate import prepare

    prepared = prepare(spec)  # bad input fails here (once), before anything loads or launches
    spec = prepared.spec
    quiet = in_torchrun() and os.environ.get("RANK") != "0"  # under torchrun rank 0 speaks
    if not quiet:
        print(f"ppdit generate: {spec.num_frames} frames at {spec.height}x{spec.width}, "
              f"{spec.num_steps} steps, layout {str(spec.layout)!r} on {spec.ranks} rank(s), "
              f"{spec.dtype}; checkpoint {spec.checkpoint}", flush=True)
        if spec.layout.step > 1 and prepared.plan.sampling.boundary is not None:
            from ppdit.parallel.runner import loop_plan
            cut = " + ".join(str(len(r)) for r in loop_plan(prepared.plan).stages)
            print(f"two experts: stages of {cut} steps (one expert each; the longest sets a "
                  "filled pipeline's pace)", flush=True)
    start = time.perf_counter()
    with tqdm(total=spec.num_steps, unit="step", desc="denoising", disable=quiet) as bar:
        # under torchrun every rank encodes on its own device and says where
        said = (lambda text: print(f"rank {os.environ['RANK']}: {text.sentence()}", flush=True)
                ) if in_torchrun() else None
        result = run_generate(prepared, on_step=lambda i: bar.update(1), device=device,
                              streaming_decode=streaming_decode, nccl_rules=nccl_rules,
                              on_text=said)
    if result is not None:
        for cost in (result.vae,) if in_torchrun() else (result.text, result.vae):
            if cost is not None:
                print(cost.sentence(), flush=True)
        _write_generate(result, out, time.perf_counter() - start)
    return 0


def _write_generate(result, out: Path, seconds: float) -> None:
    from ppdit.runtime.observe.trace import peak_memory
    from ppdit.viz.artifacts import pipeline_clip, save_strip, to_uint8_frames, write_video

    out.mkdir(parents=True, exist_ok=True)
    spec, clip = result.spec, pipeline_clip(result.video)
    video = write_video(to_uint8_frames(clip), out / "video.mp4", fps=16)  # Wan 2.1's 16 fps
    save_strip([clip], [f"{spec.layout}: {spec.prompt!r}"], out / "frames.png",
               every=max(1, clip.shape[1] // 8))
    config = {**asdict(spec), "layout": str(spec.layout), "ranks": spec.ranks}
    summary = {"config": config, "seconds": seconds,
               "video": video.name, "frames": int(result.video.shape[1]),
               "latent_shape": list(result.latent.shape),
               "handoff_bytes": result.handoff_bytes,
               "text_encoder": None if result.text is None else {
                   "device": result.text.device, "weight_bytes": result.text.weight_bytes,
                   "seconds": result.text.seconds},
               "vae_decode": None if result.vae is None else asdict(result.vae),
               # per rank, above its weights (GPU ranks; empty on CPU ranks, where counting
               # live tensors would slow the run: runtime.rounds)
               "peak_memory_bytes": peak_memory(result.trace)}
    _write_run(out, result.trace, f"ppdit generate: layout {spec.layout}, {spec.ranks} rank(s)",
               summary, [f"generated {summary['frames']} frames in {seconds:.1f} s"],
               [video.name, "frames.png"])


def info() -> int:
    """Devices, backend and a 2-rank hello: a setup check."""
    from ppdit.runtime.processes.hello import hello
    from ppdit.runtime.processes.launch import launch

    rows = launch(hello, 2, timeout_s=120)
    for row in rows or []:
        print(row)
    return 0


def _write_run(out: Path, trace, title: str, summary: dict, lines: list[str],
               written: list[str] | tuple[str, ...] = (), busy: bool = False) -> None:
    """What every job writes besides its own files (``written``, already in ``out``): the
    timeline, the Perfetto trace and the summary; then ``lines`` and where everything went."""
    from ppdit.viz.artifacts import save_timeline

    def unknown(o):  # what JSON cannot hold: a plan's ranges as [start, stop], the rest as text
        return [o.start, o.stop] if isinstance(o, range) else str(o)

    out.mkdir(parents=True, exist_ok=True)
    save_timeline(trace, out / "timeline.png", title, busy=busy)
    trace.save_chrome(out / "trace.json")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=unknown))
    for line in lines:
        print(line)
    paths = ", ".join(str(out / n) for n in (*written, "timeline.png", "trace.json",
                                               "summary.json"))
    print(f"wrote {paths} (open trace.json in https://ui.perfetto.dev)")
