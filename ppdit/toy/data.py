"""The procedural data set: short clips of one shape moving in a straight line, with its prompt.

Why procedural: no downloads, any number of clips, deterministic from a seed, and the ground
truth of every clip (colour, shape, direction) is known, so a simple detector can check what a
model generated (``ppdit.toy.detect``). Clips are tiny on purpose: 32 x 32 pixels and 13 frames
(``1 + 4 * 3``: four latent frames of the Wan VAE's 4x time compression, i.e. two causal chunks
of two latent frames), so a small VAE and DiT learn them in minutes on a CPU.

Pixels follow the Wan VAE's convention: float in [-1, 1], (3, T, H, W).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

# RGB in [0, 1]. Far apart in colour so that even a blurry reconstruction stays classifiable.
COLOURS: dict[str, tuple[float, float, float]] = {
    "red": (0.90, 0.15, 0.15), "green": (0.15, 0.75, 0.20), "blue": (0.20, 0.35, 0.95),
    "yellow": (0.95, 0.85, 0.15)}
BACKGROUND: tuple[float, float, float] = (0.10, 0.10, 0.12)
SHAPES: tuple[str, ...] = ("ball", "square")
DIRECTIONS: dict[str, tuple[int, int]] = {  # (dx, dy) in image coordinates (y grows downwards)
    "left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
SIZE = 32  # pixels, height = width
FRAMES = 13  # pixel frames: 1 + 4 * 3 (four latent frames: two causal chunks)
RADIUS = 4.0  # ball radius / half the square's side, pixels
SPEED = (0.7, 0.9)  # pixels per frame


def vocabulary() -> list[str]:
    """Every word a prompt can contain (the word-level tokenizer's vocabulary)."""
    return ["a", *COLOURS, *SHAPES, "moves", *DIRECTIONS]


@dataclass(frozen=True)
class ClipSpec:
    """What one clip shows: the prompt's three facts plus where and how fast."""

    colour: str
    shape: str
    direction: str
    x0: float  # centre at frame 0, pixels
    y0: float
    speed: float  # pixels per frame

    @property
    def prompt(self) -> str:
        """The text the clip is conditioned on, e.g. "a red ball moves left"."""
        return f"a {self.colour} {self.shape} moves {self.direction}"


def sample_spec(rng: random.Random, colour: str | None = None, shape: str | None = None,
                direction: str | None = None, size: int = SIZE, frames: int = FRAMES
                ) -> ClipSpec:
    """A random clip (the given facts fixed), placed so the shape stays inside the frame."""
    colour = colour or rng.choice(list(COLOURS))
    shape = shape or rng.choice(SHAPES)
    direction = direction or rng.choice(list(DIRECTIONS))
    speed = rng.uniform(*SPEED)
    margin, travel = RADIUS + 1.0, speed * (frames - 1)
    if travel > size - 2 * margin:
        raise ValueError(f"a shape moving {travel:.1f} px does not fit in {size} px "
                         f"(margin {margin} px each side)")
    dx, dy = DIRECTIONS[direction]
    along = rng.uniform(margin, size - margin - travel)  # start, measured from the start edge
    across = rng.uniform(margin, size - margin)
    start = along if (dx + dy) > 0 else size - along
    x0, y0 = (start, across) if dx else (across, start)
    return ClipSpec(colour, shape, direction, x0, y0, speed)


def render(spec: ClipSpec, size: int = SIZE, frames: int = FRAMES) -> torch.Tensor:
    """The clip as (3, T, H, W) floats in [-1, 1], anti-aliased (coverage of each pixel)."""
    dx, dy = DIRECTIONS[spec.direction]
    t = torch.arange(frames, dtype=torch.float32)
    cx = (spec.x0 + dx * spec.speed * t).view(-1, 1, 1)
    cy = (spec.y0 + dy * spec.speed * t).view(-1, 1, 1)
    centres = torch.arange(size, dtype=torch.float32) + 0.5
    ox, oy = centres.view(1, 1, -1) - cx, centres.view(1, -1, 1) - cy  # (T, 1, W), (T, H, 1)
    if spec.shape == "ball":
        cover = (RADIUS + 0.5 - torch.sqrt(ox**2 + oy**2)).clamp(0, 1)
    else:
        cover = (RADIUS + 0.5 - ox.abs()).clamp(0, 1) * (RADIUS + 0.5 - oy.abs()).clamp(0, 1)
    bg = torch.tensor(BACKGROUND).view(3, 1, 1, 1)
    fg = torch.tensor(COLOURS[spec.colour]).view(3, 1, 1, 1)
    pixels = bg + (fg - bg) * cover.unsqueeze(0)  # (3, T, H, W) in [0, 1]
    return pixels * 2 - 1


def make_specs(seed: int, n: int) -> list[ClipSpec]:
    """``n`` random clips, the same for the same seed on every machine (Python's ``random``)."""
    rng = random.Random(seed)
    return [sample_spec(rng) for _ in range(n)]


def make_clips(specs: list[ClipSpec], frames: int = FRAMES) -> torch.Tensor:
    """Render a batch: (N, 3, T, H, W)."""
    return torch.stack([render(s, frames=frames) for s in specs])


def held_out_specs(n: int = 20, seed: int = 10_000) -> list[ClipSpec]:
    """Evaluation prompts, balanced over colours and directions (every colour and every
    direction ``n / 4`` times), from a seed stream the training data never uses."""
    rng = random.Random(seed)
    colours, directions = list(COLOURS), list(DIRECTIONS)
    return [sample_spec(rng, colour=colours[i % 4], shape=SHAPES[(i // 4) % 2],
                        direction=directions[(i + i // 4) % 4]) for i in range(n)]
