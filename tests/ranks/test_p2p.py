"""P2P helpers on two real gloo ranks: headers, frames, zero-copy, and a clear mismatch error."""

from __future__ import annotations

import pytest
import torch

from ppdit.runtime import RankError, launch
from tests.support import workers


def test_any_tensor_round_trips(pools):
    sent, got = launch(workers.tensors_round_trip, 2, timeout_s=120, pool=pools(2))
    for a, b in zip(sent, got, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)


def test_frames_carry_payload_and_metadata_in_order(pools):
    tx, rx = launch(workers.frames, 2, timeout_s=120, pool=pools(2))
    assert rx["meta"] == [[i, 10 * i, 0] for i in range(5)]
    for a, b in zip(tx["sent"], rx["payloads"], strict=True):
        assert torch.equal(a, b)
    assert len(tx["claimed"]) == 2


def test_mismatched_frame_specs_are_reported(no_orphans):
    with pytest.raises(RankError, match=r"rank 0 sends frames .*\(4,\).* but this rank expects"):
        launch(workers.mismatched_frames, 2, timeout_s=120)
