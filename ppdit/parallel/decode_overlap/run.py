"""Decode overlap from the caller's side: run plans side by side on 2 ranks, read the frames'
arrival times off the timeline, and the single-device reference."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

from ppdit.parallel.decode_overlap.plan import DECODER_RANK, OverlapPlan
from ppdit.parallel.decode_overlap.ranks import OverlapRunner
from ppdit.runtime.observe.trace import Rounds, Trace
from ppdit.runtime.rounds import run_side_by_side
from ppdit.sampler import generate
from ppdit.vae.streaming import StreamingDecoder


@dataclass
class OverlapResult(Rounds):
    """Merged outcome: the decoded video, the latents it came from, one timeline per round."""

    plan: OverlapPlan
    video: torch.Tensor  # (1, 3, 1 + 4 (F - 1), H', W'): every decoded frame, in order
    latents: torch.Tensor  # (1, C, F, H, W): the chunks as the decoder received them
    traces: list[Trace]

    def first_frame_s(self, round_index: int = -1) -> float:
        """Seconds from the round's start to the end of the first decode: the first frame."""
        return frames_ready(self.traces[round_index])[0][0]

    def summary(self) -> dict[str, float]:
        """Median makespan and first-frame time over rounds, in seconds."""
        return {"makespan_s": statistics.median(self.makespans_s),
                "first_frame_s": statistics.median(
                    self.first_frame_s(i) for i in range(len(self.traces)))}


def frames_ready(trace: Trace) -> list[tuple[float, int]]:
    """(seconds since the start, pixel frames available so far) after every decode span."""
    out, total = [], 0
    for s in trace.select("decode"):
        total += s.meta["frames_out"]
        out.append((s.end_ns / 1e9, total))
    return out


def run_decode_overlap(plans: dict[str, OverlapPlan], rounds: int = 1, **launch_kwargs
                       ) -> dict[str, OverlapResult]:
    """Launch 2 ranks and run every plan ``rounds`` times, interleaved round by round.

    All plans must share the models (one ``source``): each rank builds its model once.
    Ranks get one thread each unless ``threads_per_rank`` says otherwise."""
    runs = run_side_by_side(plans, runner=OverlapRunner, world_size=2, rounds=rounds,
                            **launch_kwargs)
    out = {}
    for name, plan in plans.items():
        video, latents = runs[name].last()[DECODER_RANK]
        out[name] = OverlapResult(plan, video, latents, runs[name].traces)
    return out


def overlap_reference(model: torch.nn.Module, vae, plan: OverlapPlan
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """(latents, video) on one device: the same chunks, pushed the same way (== the run, bit for
    bit). With ``push_frames=1`` the video also equals ``decode_full(vae, latents)`` bitwise."""
    chunks = [generate(model, r, preset=plan.preset, sampling=plan.sampling,
                       latent_shape=plan.chunk_shape) for r in plan.requests()]
    with StreamingDecoder(vae) as decoder:
        frames = [decoder.push(p) for k, c in enumerate(chunks) for p in plan.pushes(c, k)]
    return torch.cat(chunks, dim=2), torch.cat(frames, dim=2)
