"""The patch-parallel decode from the caller's side: one plan, any VAE, on the rounds harness.

``PatchPlan(latents, ranks, source)`` decodes latents (as the VAE reads them: denormalized)
split by rows over ``ranks`` ranks. The VAE comes from the plan's ``ModelSource``, like every
layout's weights: a seeded preset (the lessons and tests) or a pipeline folder's VAE
(``ppdit generate --vae-ranks N``); every rank builds it before the process group exists and
holds it whole (Wan's is a few hundred MB: the activations are what the split is for). Plans of
several sizes run side by side in one launch (``run_patches``), each over the first n ranks of
its own group (``runtime.comm.mesh``), interleaved round by round as every layout's are.
``one_process_decode`` is the reference: ``decode_full`` and its peak (``observe.memory``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from diffusers import AutoencoderKLWan

from ppdit.checkpoint.source import ModelSource
from ppdit.parallel.share import check_plans
from ppdit.parallel.vae_patch.decode import GATHER, decode_patch_parallel
from ppdit.parallel.vae_patch.halo import RowGroup
from ppdit.runtime.comm.mesh import Mesh
from ppdit.runtime.observe.memory import track_peak_memory
from ppdit.runtime.observe.timing import timed
from ppdit.runtime.observe.trace import Tracer, peak_memory
from ppdit.runtime.processes.rank import RankContext
from ppdit.runtime.rounds import Runner, run_side_by_side
from ppdit.vae.streaming import decode_full


@dataclass(frozen=True)
class PatchPlan:
    """Latents decoded split by rows over ``ranks`` ranks (picklable: every rank gets it)."""

    latents: tuple[torch.Tensor, ...]  # (B, z, F, H, W) each, denormalized, held by every rank
    ranks: int = 2
    source: ModelSource = field(default_factory=ModelSource)  # whose VAE (a preset's, seeded)
    chunk_frames: tuple[int, ...] = (1,)  # 1: diffusers' per-frame loop; > 1: streamed chunks
    gather: str = "all"  # who gets the whole video: every rank, or rank 0 ("first")
    peaks: bool = False  # after the rounds: case 0's peaks, rows kept and rows gathered
    weights = "vae"  # what each rank holds (``runtime.fit`` checks it fits)

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.gather not in GATHER[:2] or not self.latents:
            raise ValueError(f"ranks={self.ranks} must be >= 1, gather={self.gather!r} one of "
                             f"{GATHER[:2]}, and there must be latents to decode")

    @property
    def world_size(self) -> int:
        return self.ranks


@dataclass
class RankPeaks:
    """One rank's peak tensor bytes while decoding case 0 (above the weights and latents)."""

    rows: int  # decoding its own rows, nothing gathered
    gathered: int  # the same, then the whole video gathered on rank 0


class PatchRunner(Runner):
    """Every plan of a side-by-side job on one rank: its row group, its decodes."""

    check = staticmethod(check_plans)

    @staticmethod
    def prepare(rank: int, world_size: int, plans: tuple) -> AutoencoderKLWan:
        """Before the process group exists: the plans' one VAE (``check_plans``)."""
        return plans[0].source.vae()

    def __init__(self, ctx: RankContext, plans: Sequence[PatchPlan]):
        super().__init__(ctx, plans)
        self.vae = (ctx.prepared or self.prepare(ctx.rank, ctx.world_size, plans)).to(ctx.device)
        meshes = [Mesh.of(rows=p.ranks).build(ctx.rank) for p in plans]  # collective, in order
        self.rows = [None if m is None else RowGroup.of(m.group("rows"), ctx.wire)
                     for m in meshes]

    def takes_part(self, i: int) -> bool:
        return self.rows[i] is not None

    def model_of(self, i: int):
        return self.vae

    def run(self, i: int, tracer: Tracer) -> dict:
        """Every case with every chunk size: the videos this rank gathered, and the seconds."""
        plan, videos = self.plans[i], {}
        with timed(self.ctx.placement) as clock:
            for c, latents in enumerate(plan.latents):
                for k in plan.chunk_frames:
                    with tracer.span("compute", f"decode case {c}, chunks of {k}"):
                        video = decode_patch_parallel(
                            self.vae, latents.to(self.ctx.device), self.rows[i],
                            chunk_frames=k, gather=plan.gather)
                    videos[(c, k)] = None if video is None else video.cpu()
        return {"videos": videos, "seconds": clock.seconds}

    def result(self, i: int) -> RankPeaks | None:
        """After the rounds: the two peaks of case 0, when the plan asks."""
        plan = self.plans[i]
        if not plan.peaks:
            return None
        return RankPeaks(*(self._peak(plan, self.rows[i], g) for g in ("none", "first")))

    def _peak(self, plan: PatchPlan, rows: RowGroup, gather: str) -> int:
        latents = plan.latents[0].to(self.ctx.device)
        with track_peak_memory(self.ctx.placement) as mem:
            decode_patch_parallel(self.vae, latents, rows, chunk_frames=plan.chunk_frames[0],
                                  gather=gather)
        return mem.peak_bytes


@dataclass
class PatchRun:
    """One plan's outcome: rank 0's videos by (case, chunk frames), whether every rank that
    gathered holds the same, and per rank its decodes' seconds, its round's peak tensor bytes
    above the weights and latents (run with ``memory=True``; else 0) and (``peaks``) case 0's
    two peaks, rows kept and rows gathered on rank 0."""

    plan: PatchPlan
    videos: dict[tuple[int, int], torch.Tensor]
    same_everywhere: bool
    seconds: list[float]
    run_peaks: list[int]
    peaks: list[RankPeaks | None]

    @property
    def video(self) -> torch.Tensor:
        """Case 0 at the first chunk size."""
        return self.videos[(0, self.plan.chunk_frames[0])]


def run_patches(plans: dict[str, PatchPlan], rounds: int = 1,
                **launch_kwargs) -> dict[str, PatchRun]:
    """Several patch plans (one VAE source) in one launch, interleaved round by round; ranks
    get one thread each unless ``threads_per_rank`` says otherwise."""
    launch_kwargs.setdefault("echo", False)
    world = max(p.ranks for p in plans.values())
    runs = run_side_by_side(plans, runner=PatchRunner,
                            world_size=world, rounds=rounds, **launch_kwargs)
    out = {}
    for name, r in runs.items():
        last = r.last()
        ranks = sorted(last)
        mine = last[ranks[0]]["videos"]
        same = all(torch.equal(v, mine[k]) for rank in ranks
                   for k, v in last[rank]["videos"].items() if v is not None)
        peak = peak_memory(r.traces[-1])
        out[name] = PatchRun(plans[name], mine, same, [last[k]["seconds"] for k in ranks],
                             [peak.get(k, 0) for k in ranks], [r.results[k] for k in ranks])
    return out


def run_patch(plan: PatchPlan, **launch_kwargs) -> PatchRun:
    """One patch plan on ``plan.ranks`` ranks."""
    return run_patches({"plan": plan}, **launch_kwargs)["plan"]


def one_process_decode(vae: AutoencoderKLWan, latents: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The reference: ``decode_full`` on this process, and its peak tensor bytes."""
    with track_peak_memory() as mem:
        video = decode_full(vae, latents)
    return video, mem.peak_bytes
