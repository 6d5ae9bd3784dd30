"""Layer-split stage models, without ranks: each rank builds only its blocks."""

from __future__ import annotations

import torch

from ppdit.parallel.layer_split.ranks import build_stage_model
from tests.support.layer_split_plans import PLANS


def test_stage_model_drops_other_blocks():
    plan = PLANS["p2_v2_m4"]
    model = build_stage_model(plan, 1)
    kept = [i for i, b in enumerate(model.blocks) if not isinstance(b, torch.nn.Identity)]
    assert kept == [1, 3]  # chunks (1, 3) of 4 single-block chunks belong to rank 1
    assert model.patch_embedding is None and model.proj_out is not None
