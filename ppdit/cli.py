"""``ppdit`` on the command line (argument parsing only; the jobs are ``ppdit.jobs``).

    python -m ppdit demo                        # the streaming system: rank 0 + a 2-rank TP mesh
    python -m ppdit step-split                  # lessons 01-02: step-split PP with filling
    python -m ppdit generate --checkpoint DIR --prompt "a fox"   # prompt -> video.mp4
    python -m ppdit info                        # devices, backend, a 2-rank hello
    python -m ppdit gpu-check                   # on a GPU machine: GPU tests + measurements
    torchrun --nproc-per-node 3 -m ppdit demo   # ranks started by torchrun (GPUs: NCCL)
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

from ppdit import jobs, toy
from ppdit._fork_server import start_early
from ppdit.analysis.gpu_run_schema import MEASUREMENTS
from ppdit.parallel.layout import AXES
from ppdit.t2v.spec import LAYOUTS

GPU_CHECK_SECTIONS = tuple(MEASUREMENTS)  # gpu-check's sections in order (imports no torch)
# commands that fork CPU ranks (gpu-check runs on a GPU, whose ranks spawn, or only reports)
LAUNCHES = ("demo", "step-split", "generate", "info")


class _Help(argparse.HelpFormatter):
    """``--help`` shows every default: appended as "(default: X)" unless the help text states
    it already (defaults that depend on other options are written out by hand)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text, default = action.help or "", action.default
        if "default" in text or not action.option_strings or any(
                default is none for none in (None, False, argparse.SUPPRESS)):
            return text
        return f"{text} (default: {'none' if default == '' else '%(default)s'})".lstrip()


def parser() -> argparse.ArgumentParser:
    """Every subcommand and its options."""
    p = argparse.ArgumentParser(prog="ppdit", description=__doc__.splitlines()[0],
                                formatter_class=_Help)
    sub = p.add_subparsers(dest="command", required=True,  # every parser shows its defaults
                           parser_class=partial(argparse.ArgumentParser, formatter_class=_Help))
    demo = sub.add_parser("demo", help="the streaming system (controller + TP mesh); writes a "
                                       "video, a timeline, a trace and a summary")
    demo.add_argument("--out", type=Path, default=Path("out/demo"), help="artifact folder")
    demo.add_argument("--chunks", type=int, default=None,
                      help="chunks to stream across the cut (default: 6)")
    demo.add_argument("--cut-at", type=int, default=None,
                      help="hard cut before this chunk (default: 4 toy, 3 random; -1: none)")
    demo.add_argument("--tp", type=int, default=2, help="mesh ranks (tensor parallel degree)")
    demo.add_argument("--steps", type=int, default=None,
                      help="denoising steps per chunk (default: 8 toy, 4 random)")
    demo.add_argument("--model", default="toy", choices=["toy", "random"],
                      help="toy: the trained models/toy_shapes (a visible video); random: the "
                           "random-weight tiny preset (noise; the lessons' shapes and timings)")
    demo.add_argument("--prompts", nargs=2, metavar=("BEFORE", "AFTER"),
                      default=list(jobs.TOY_PROMPTS),
                      help="toy model: the prompt before and after the hard cut")
    _placement_args(demo)
    plan = sub.add_parser("plan", help="what a layout needs per GPU and a lower bound of its "
                                       "step, for a real model and GPU (nothing runs)")
    plan.add_argument("--model", default="wan2.1-14b", help="wan2.1-1.3b or wan2.1-14b")
    plan.add_argument("--gpu", default="H100 SXM", help="a GPU of the hardware table")
    plan.add_argument("--layout", default="ulysses=4,fsdp",
                      help="a layout as for generate (e.g. cfg=2,ulysses=4,fsdp)")
    plan.add_argument("--link", default=None, help="one link (default: every link of the GPU)")
    step = sub.add_parser("step-split", help="step-split PP with pipeline filling (lesson 01)")
    step.add_argument("--out", type=Path, default=Path("out/step_split"), help="artifact folder")
    step.add_argument("--stages", type=int, default=2, help="pipeline stages (ranks)")
    step.add_argument("--requests", type=int, default=8, help="requests to generate")
    step.add_argument("--steps", type=int, default=28, help="denoising steps per request")
    step.add_argument("--preset", default="tiny", help="model preset (tiny, small, ...)")
    step.add_argument("--mode", default="filled", choices=["filled", "stream_batch"],
                      help="requests in flight one per stage, or batched (lesson 02)")
    _placement_args(step)
    _generate_args(sub.add_parser("generate", help="prompt -> video from a local diffusers Wan "
                                  "2.1 pipeline folder, with any layout; writes video.mp4, "
                                  "frames.png, timeline.png, trace.json, summary.json"))
    sub.add_parser("info", help="devices, backend and a 2-rank hello: a setup check")
    gpu = sub.add_parser("gpu-check", help="on a CUDA machine: the GPU tests, then the GPU "
                                           "measurements; writes gpu_runs/<gpu>-<date>.json")
    gpu.add_argument("--out", type=Path, default=Path("gpu_runs"), help="folder for the report")
    gpu.add_argument("--skip-tests", action="store_true", help="measurements only")
    gpu.add_argument("--tests-timeout", type=float, default=None, metavar="S",
                     help="stop the GPU test suite after S seconds (default: its stage's budget)")
    gpu.add_argument("--dry-run", action="store_true",
                     help="list the stages with their budgets; run nothing")
    gpu.add_argument("--skip", action="append", default=[], metavar="SECTION",
                     choices=GPU_CHECK_SECTIONS, help="leave a measurement out (repeatable): "
                     + ", ".join(GPU_CHECK_SECTIONS))
    return p


def _generate_args(g: argparse.ArgumentParser) -> None:
    # The defaults make a video you can see with the committed toy model (models/toy_shapes:
    # 32 x 32 pixels, 13 frames, prompts like "a red ball moves left"); a real Wan 2.1 folder
    # wants e.g. --frames 81 --height 480 --width 832 --steps 50.
    g.add_argument("--checkpoint", type=Path, default=toy.FOLDER,
                   help="local pipeline folder (model_index.json, transformer/, vae/, "
                        "text_encoder/, tokenizer/, scheduler/); nothing is downloaded "
                        "(default: the trained toy, models/toy_shapes)")
    g.add_argument("--prompt", default="a red ball moves left", help="what the video shows")
    g.add_argument("--negative-prompt", default="", help="used with guidance > 1")
    g.add_argument("--layout", default="single",
                   help=f"how the denoising is split over ranks: one of {', '.join(LAYOUTS)}, "
                        f"or degrees per axis, e.g. cfg=2,ulysses=2,ring=2 (axes: "
                        f"{', '.join(AXES)})")
    g.add_argument("--ranks", type=int, default=None, help="ranks (default: 1 for single, 4 for "
                   "pp_tp and usp, else 2; a composed layout: the product of its degrees)")
    g.add_argument("--steps", type=int, default=12, help="denoising steps")
    g.add_argument("--frames", type=int, default=13, help="pixel frames, 4k + 1")
    g.add_argument("--height", type=int, default=32, help="pixels, a multiple of 16")
    g.add_argument("--width", type=int, default=32, help="pixels, a multiple of 16")
    g.add_argument("--seed", type=int, default=0, help="the noise's seed")
    g.add_argument("--guidance", type=float, default=5.0, help="CFG scale (> 1: on)")
    g.add_argument("--cache-threshold", type=float, default=None,
                   help="First-Block-Cache: skip the blocks after the first where its "
                        "residual moved by at most this (diffusers' FirstBlockCacheConfig)")
    g.add_argument("--guidance-2", type=float, default=None,
                   help="Wan 2.2: the low-noise expert's CFG scale (default: --guidance)")
    g.add_argument("--solver", default="folder", choices=["folder", "euler"],
                   help="the folder's scheduler, or ppdit's Euler (the teaching baseline)")
    g.add_argument("--out", type=Path, default=Path("out/generate"), help="artifact folder")
    g.add_argument("--text-encoder", default="device", choices=["device", "cpu"],
                   help="where umT5 encodes the prompts before the DiT loads: the ranks' device "
                        "(then freed) or the CPU (offloaded: never on a GPU, slower)")
    g.add_argument("--streaming-decode", action="store_true", help="decode one latent frame at a "
                   "time (same pixels, a fraction of the memory: for long videos on a small GPU)")
    g.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="bound the whole run and every wait inside it by S seconds (default: "
                        "30 min until the ranks have timed a step, then from that step's time)")
    g.add_argument("--image", default=None, metavar="PATH",
                   help="Wan 2.2 TI2V: the first frame, a picture of the video's size")
    g.add_argument("--vae-ranks", type=int, default=1,
                   help="ranks that decode the latent split by rows, after the denoising ranks "
                        "end (patch-parallel VAE: each holds ~1/N of the activations)")
    _placement_args(g, folder=True)


def _placement_args(p: argparse.ArgumentParser, folder: bool = False) -> None:
    p.add_argument("--dtype", default="auto" if folder else "fp32",
                   choices=["auto"] * folder + ["fp32", "bf16", "fp16"],
                   help="the DiT's weights and activations (latents stay fp32)"
                        + "; auto: the dtype the folder's transformer is stored in" * folder)
    p.add_argument("--device", default=None, choices=["auto", "cpu", "cuda"],
                   help="where ranks compute (default: $PPDIT_DEVICE, else a GPU if present)")
    p.add_argument("--nccl-rules", action="store_true",
                   help="CPU ranks keep NCCL's point-to-point rules (one ordered queue per "
                        "peer, rendezvous above 4 MiB): an order that would hang on GPUs "
                        "fails here, naming both queues (same as $PPDIT_NCCL_RULES=1)")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m ppdit`` and the ``ppdit`` console script."""
    args = parser().parse_args(argv)
    if args.command == "plan":
        return _plan(args)
    try:  # bad input: the rule it breaks, before anything loads, starts or launches
        args.prepared = _prepare(args) if args.command == "generate" else None
    except ValueError as e:
        print(f"ppdit {args.command}: {e}", file=sys.stderr)
        return 2
    if args.command in LAUNCHES:  # generate's checks above imported torch already: bad input
        start_early()  # must not start the server; the others' imports overlap with it

    try:
        return _run(args)
    except KeyboardInterrupt:
        # The ranks are already gone (the launcher ends them before re-raising); say so.
        print("KeyboardInterrupt: stopped, and every rank has ended", file=sys.stderr)
        return 130  # the shell's code for "ended by SIGINT"


def _run(args: argparse.Namespace) -> int:
    if args.command == "info":
        return jobs.info()
    if args.command == "gpu-check":  # see ppdit.gpu_check; without CUDA it says so, exit 1
        from ppdit.gpu_check.run import dry_run, gpu_check

        if args.dry_run:
            return dry_run()
        return gpu_check(args.out, tests=not args.skip_tests, tests_timeout_s=args.tests_timeout,
                         skip=args.skip)
    rules = args.nccl_rules or None  # None leaves the choice to $PPDIT_NCCL_RULES
    if args.command == "generate":
        return jobs.generate(args.prepared, args.out, device=args.device,
                             streaming_decode=args.streaming_decode, nccl_rules=rules)
    if args.command == "demo":  # --cut-at: None = the model's default (jobs.demo's -1), < 0 = none
        cut_at = -1 if args.cut_at is None else None if args.cut_at < 0 else args.cut_at
        return jobs.demo(args.out, chunks=args.chunks, cut_at=cut_at, tp=args.tp,
                         num_steps=args.steps, dtype=args.dtype, device=args.device,
                         model=args.model, prompts=tuple(args.prompts), nccl_rules=rules)
    return jobs.step_split(args.out, stages=args.stages, requests=args.requests,
                           num_steps=args.steps, preset=args.preset, mode=args.mode,
                           dtype=args.dtype, device=args.device, nccl_rules=rules)


def _plan(args: argparse.Namespace) -> int:
    from ppdit.analysis.plan import plan_report, plan_rows

    try:
        rows = plan_rows(args.model, args.gpu, args.layout, link=args.link)
    except (ValueError, KeyError) as e:  # bad input: the rule it breaks, not a traceback
        print(f"ppdit plan: {e}", file=sys.stderr)
        return 2
    print(plan_report(rows, layout=args.layout))
    return 0


def _prepare(args: argparse.Namespace):
    """The generate request, checked against its folder and planned (``t2v.generate``)."""
    from ppdit.parallel.layout import parse_layout
    from ppdit.t2v.generate import prepare
    from ppdit.t2v.spec import GenerateSpec

    return prepare(GenerateSpec(
        str(args.checkpoint), args.prompt, args.negative_prompt,
        layout=parse_layout(args.layout, args.ranks), dtype=args.dtype, num_steps=args.steps,
        num_frames=args.frames, height=args.height, width=args.width, seed=args.seed,
        guidance_scale=args.guidance, guidance_scale_2=args.guidance_2,
        cache_threshold=args.cache_threshold, solver=args.solver,
        text_encoder=args.text_encoder, vae_ranks=args.vae_ranks, timeout_s=args.timeout,
        image=args.image),
        device=args.device)


if __name__ == "__main__":
    sys.exit(main())
