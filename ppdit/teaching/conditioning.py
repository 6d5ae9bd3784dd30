"""What an image-conditioned Wan must keep straight under sequence parallelism (lesson 17), run
on two ranks with Ulysses: the correct split beside the two mistakes peers have shipped.

* **Wan 2.2 TI2V's timestep per token** belongs to its token: each rank embeds and applies the
  modulation of its own slice (``model.condition(mine=...)``). The mistake: every rank applying
  the same rows, the first slice's (a tensor replicated and indexed as if each rank's tokens
  began at 0); the image's frame, at t = 0 on rank 0 only, leaks into rank 1's modulation.
* **Wan 2.1 I2V's CLIP tokens** are context, like the prompt: every rank's cross-attention reads
  all of them. The mistake (diffusers #12909): splitting them with the sequence, so each rank
  attends to a share of the picture.

Each is one forward of a tiny random model from one seed, the result gathered on every rank
and compared with one device's forward.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
import torch.distributed as dist

from ppdit.model import (
    WAN_TEXT_LEN,
    build_model,
    forward_by_stages,
    project_out,
    prologue,
    run_blocks,
    unpatchify,
)
from ppdit.parallel.sequence.comms import even_split
from ppdit.parallel.sequence.ulysses import gather_tokens, install_ulysses
from ppdit.presets import get_preset
from ppdit.runtime.processes.rank import RankContext
from ppdit.sampler import Request, frame_timesteps, initial_noise, prompt_embeddings

TI2V_SHAPE = (1, 48, 3, 8, 8)  # 3 latent frames of 4 x 4 tokens: the image is frame 0
I2V_SHAPE = (1, 16, 2, 8, 8)
IMAGE_TOKENS = 16  # CLIP tokens of the tiny I2V model (ViT-H gives 257)


@torch.no_grad()
def ulysses_forward(model, latent, timestep, text, *, rows: str = "mine") -> torch.Tensor:
    """``sp_forward``'s steps on this rank's token slice; ``rows="first"``: the per-token
    modulation's rows of the first slice instead of this rank's own (the mistake)."""
    group, rank, world = dist.group.WORLD, dist.get_rank(), dist.get_world_size()
    split = even_split(math.prod(latent.shape[2:]) // 4, world)  # 1 x 2 x 2 patches
    install_ulysses(model, group, split, v_first=True)
    start = sum(split[:rank])
    rows_of = slice(0, split[rank]) if rows == "first" else slice(start, start + split[rank])
    hidden, ctx = prologue(model, latent, timestep, text, rows_of)
    cos, sin = ctx.rotary_emb
    local = replace(ctx, rotary_emb=(cos[:, start:start + split[rank]],
                                     sin[:, start:start + split[rank]]))
    mine = hidden[:, start:start + split[rank]].contiguous()
    tokens = project_out(model, run_blocks(model, mine, local), local)
    return unpatchify(model, gather_tokens(tokens, split, group), ctx.grid)


@torch.no_grad()
def timestep_rows(ctx: RankContext) -> dict:
    """TI2V, the image's frame at t = 0: one device, each rank's own rows, the first rows."""
    model = build_model("tiny-ti2v")
    request = Request(0, 0)
    latent, text = initial_noise(request, TI2V_SHAPE), prompt_embeddings(request, "tiny-ti2v")
    t = frame_timesteps(torch.tensor([500.0]), TI2V_SHAPE[2])
    one = forward_by_stages(model, latent, t, text)
    return {"one": one, **{rows: ulysses_forward(model, latent, t, text, rows=rows)
                           for rows in ("mine", "first")}}


def i2v_model():
    """A tiny Wan 2.1 I2V transformer: 36 channels in, CLIP tokens of width 24."""
    p = replace(get_preset("tiny"), name="tiny-i2v", condition_channels=20, image_dim=24)
    return build_model(p)


@torch.no_grad()
def image_tokens(ctx: RankContext) -> dict:
    """Wan 2.1 I2V: one device, every rank all the CLIP tokens, each rank its share of them."""
    model = i2v_model()
    g = torch.Generator().manual_seed(0)
    latent = torch.randn(*I2V_SHAPE[:1], 36, *I2V_SHAPE[2:], generator=g)
    text = torch.randn(1, WAN_TEXT_LEN, model.config.text_dim, generator=g)
    clip = torch.randn(1, IMAGE_TOKENS, model.config.image_dim, generator=g)

    def context(image: torch.Tensor) -> torch.Tensor:  # the CLIP tokens in front, padded
        pad = torch.nn.functional.pad(image, (0, text.shape[2] - image.shape[2]))
        return torch.cat([pad, text], dim=1)

    t = torch.tensor([500.0])
    one = forward_by_stages(model, latent, t, context(clip))
    share = clip.chunk(dist.get_world_size(), dim=1)[dist.get_rank()]
    return {"one": one, "whole": ulysses_forward(model, latent, t, context(clip)),
            "split": ulysses_forward(model, latent, t, context(share))}


def gaps(rows: list[dict], right: str, wrong: str) -> tuple[float, float]:
    """Largest |difference| from one device of the right way and of the mistake, over ranks."""
    def worst(name: str) -> float:
        return max(float((r[name] - r["one"]).abs().max()) for r in rows)
    return worst(right), worst(wrong)
