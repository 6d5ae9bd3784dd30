"""A deterministic detector: what colour is the moving thing, and which way does it move?

No learning, so its verdict cannot be fooled by the model it checks:

* foreground = pixels whose RGB is farther than ``FG_DISTANCE`` from the known background;
* colour = the palette colour nearest to the mean foreground RGB of the whole clip;
* motion = the foreground centroid's displacement from the first third of the frames to the last
  third; the larger axis and its sign give left / right / up / down, and a displacement under
  ``MIN_TRAVEL`` pixels (or no foreground) is "none" (wrong for every prompt).

On the data set's own clips it is right every time; on noise it lands near chance (the tests
check both), which is what makes it a fair judge of generated clips.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ppdit.toy.data import BACKGROUND, COLOURS, DIRECTIONS, ClipSpec

FG_DISTANCE = 0.25  # RGB distance (in [0, 1] units) from the background that counts as shape
MIN_PIXELS = 4.0  # foreground pixels (summed weight) a frame needs for a centroid
MIN_TRAVEL = 2.0  # pixels of centroid motion below which the clip "does not move"


@dataclass(frozen=True)
class Detection:
    """What the detector saw in one clip."""

    colour: str | None
    direction: str  # one of DIRECTIONS, or "none"
    travel: tuple[float, float]  # centroid displacement (dx, dy), pixels


@dataclass(frozen=True)
class Score:
    """One clip judged against its prompt."""

    prompt: str
    detected_colour: str | None
    detected_direction: str
    colour_ok: bool
    direction_ok: bool
    every_frame_ok: bool  # every frame's own colour is the prompt's (``frame_colours``)

def _rgb(clip: torch.Tensor) -> torch.Tensor:
    return (clip.float().clamp(-1, 1) + 1) / 2


def _nearest(rgb: torch.Tensor) -> str:
    """The palette colour nearest to an RGB (3,) in [0, 1]."""
    return list(COLOURS)[int((torch.tensor(list(COLOURS.values())) - rgb).norm(dim=1).argmin())]


def foreground(clip: torch.Tensor) -> torch.Tensor:
    """(T, H, W) bool mask from a (3, T, H, W) clip in [-1, 1]."""
    return (_rgb(clip) - torch.tensor(BACKGROUND).view(3, 1, 1, 1)).norm(dim=0) > FG_DISTANCE


def detect(clip: torch.Tensor) -> Detection:
    """Colour and motion of a (3, T, H, W) clip in [-1, 1]."""
    if clip.ndim != 4 or clip.shape[0] != 3:
        raise ValueError(f"detect expects one clip (3, T, H, W), got shape {tuple(clip.shape)}")
    mask = foreground(clip)
    if not mask.any():
        return Detection(None, "none", (0.0, 0.0))
    return Detection(_nearest(_rgb(clip)[:, mask].mean(dim=1)), *_motion(mask))


def frame_colours(clip: torch.Tensor) -> list[str | None]:
    """The palette colour of each frame's foreground (None: fewer than ``MIN_PIXELS`` of it),
    for a (3, T, H, W) clip in [-1, 1]: where in a clip a wrong colour shows."""
    mask, rgb = foreground(clip), _rgb(clip)
    return [None if mask[t].sum() < MIN_PIXELS else _nearest(rgb[:, t][:, mask[t]].mean(dim=1))
            for t in range(clip.shape[1])]


def _motion(mask: torch.Tensor) -> tuple[str, tuple[float, float]]:
    t, h, w = mask.shape
    m = mask.float()
    counts = m.sum(dim=(1, 2))
    ys, xs = torch.arange(h).float() + 0.5, torch.arange(w).float() + 0.5
    cx = (m.sum(dim=1) * xs).sum(dim=1) / counts.clamp(min=1)
    cy = (m.sum(dim=2) * ys).sum(dim=1) / counts.clamp(min=1)
    third = max(1, t // 3)
    early, late = counts[:third] >= MIN_PIXELS, counts[-third:] >= MIN_PIXELS
    if not early.any() or not late.any():
        return "none", (0.0, 0.0)
    dx = float(cx[-third:][late].mean() - cx[:third][early].mean())
    dy = float(cy[-third:][late].mean() - cy[:third][early].mean())
    if max(abs(dx), abs(dy)) < MIN_TRAVEL:
        return "none", (dx, dy)
    step = (int(dx > 0) * 2 - 1, 0) if abs(dx) >= abs(dy) else (0, int(dy > 0) * 2 - 1)
    return next(k for k, v in DIRECTIONS.items() if v == step), (dx, dy)


def parse_prompt(prompt: str) -> tuple[str, str]:
    """(colour, direction) a prompt asks for; a prompt outside the toy grammar is an error."""
    words = prompt.lower().split()
    colours = [w for w in words if w in COLOURS]
    directions = [w for w in words if w in DIRECTIONS]
    if len(colours) != 1 or len(directions) != 1:
        raise ValueError(f"prompt {prompt!r} must name exactly one colour of {list(COLOURS)} "
                         f"and one direction of {list(DIRECTIONS)}")
    return colours[0], directions[0]


def score(clip: torch.Tensor, prompt: str | ClipSpec) -> Score:
    """Judge one clip against its prompt."""
    text = prompt.prompt if isinstance(prompt, ClipSpec) else prompt
    colour, direction = parse_prompt(text)
    found = detect(clip)
    return Score(text, found.colour, found.direction, found.colour == colour,
                 found.direction == direction, all(c == colour for c in frame_colours(clip)))


def accuracy(scores: list[Score]) -> dict[str, float]:
    """Colour and direction accuracy over a list of scores, and the share of clips whose
    every frame shows the prompt's colour."""
    n = max(1, len(scores))
    return {"colour_accuracy": sum(s.colour_ok for s in scores) / n,
            "direction_accuracy": sum(s.direction_ok for s in scores) / n,
            "every_frame_colour_accuracy": sum(s.every_frame_ok for s in scores) / n}
