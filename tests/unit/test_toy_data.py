"""The toy data set is deterministic and the detector is a fair judge: right on the data set's
own clips, near chance on noise."""

import random

import pytest
import torch

from ppdit.toy import data
from ppdit.toy.data import (
    COLOURS,
    DIRECTIONS,
    FRAMES,
    SIZE,
    held_out_specs,
    make_clips,
    make_specs,
    render,
    sample_spec,
    vocabulary,
)
from ppdit.toy.detect import accuracy, detect, frame_colours, parse_prompt, score


def test_same_seed_same_clips_and_other_seed_differs():
    a, b, c = make_specs(3, 8), make_specs(3, 8), make_specs(4, 8)
    assert a == b and a != c
    assert torch.equal(make_clips(a), make_clips(b))


def test_clip_shape_range_and_prompt_words():
    spec = make_specs(0, 1)[0]
    clip = render(spec)
    assert clip.shape == (3, FRAMES, SIZE, SIZE)
    assert clip.min() >= -1 and clip.max() <= 1
    assert set(spec.prompt.split()) <= set(vocabulary())


def test_shape_stays_inside_the_frame():
    for spec in make_specs(1, 200):
        clip = render(spec)
        border = torch.cat([clip[..., 0, :], clip[..., -1, :], clip[..., :, 0], clip[..., :, -1]],
                           dim=-1)
        assert (border - border[:, :1, :1]).abs().max() < 1e-6, spec


def test_detector_scores_the_data_set_perfectly():
    specs = make_specs(0, 200) + held_out_specs()
    acc = accuracy([score(render(s), s) for s in specs])
    assert acc == {"colour_accuracy": 1.0, "direction_accuracy": 1.0,
                   "every_frame_colour_accuracy": 1.0}


def test_detector_is_near_chance_on_noise():
    g = torch.Generator().manual_seed(0)
    specs = held_out_specs()
    acc = accuracy([score(torch.rand((3, FRAMES, SIZE, SIZE), generator=g) * 2 - 1, s)
                    for s in specs])
    chance = 1 / len(COLOURS)
    assert acc["colour_accuracy"] <= 2 * chance and acc["direction_accuracy"] <= 2 * chance


def test_held_out_prompts_are_balanced():
    specs = held_out_specs(20)
    for colour in COLOURS:
        assert sum(s.colour == colour for s in specs) == 5
    for direction in DIRECTIONS:
        assert sum(s.direction == direction for s in specs) == 5


def test_detects_each_direction():
    rng = random.Random(5)
    for direction in DIRECTIONS:
        assert detect(render(sample_spec(rng, direction=direction))).direction == direction


def test_bad_prompt_and_bad_clip_are_clear_errors():
    with pytest.raises(ValueError, match="exactly one colour"):
        parse_prompt("a purple ball moves left")
    with pytest.raises(ValueError, match="one clip"):
        detect(torch.zeros(2, 3, 8, 8))


def test_frame_colours_name_each_frame_and_an_empty_one():
    spec = data.ClipSpec("red", "ball", "right", 8, 16, 1)
    clip = data.render(spec)
    assert frame_colours(clip) == ["red"] * clip.shape[1]
    clip[:, 0] = data.render(data.ClipSpec("blue", "square", "up", 16, 20, 1))[:, 0]
    clip[:, 1] = torch.tensor(data.BACKGROUND).view(3, 1, 1) * 2 - 1  # nothing in frame 1
    colours = frame_colours(clip)
    assert colours[:2] == ["blue", None] and set(colours[2:]) == {"red"}
