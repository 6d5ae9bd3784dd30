"""P2P helpers on two real gloo ranks: headers, frames, zero-copy, and a clear mismatch error."""

from __future__ import annotations

import pytest
import torch

from ppdit.runtime import RankError, launch
from ppdit.runtime.comm.wire import FrameSpec, Wire
from tests import workers


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


def test_frame_layout_is_aligned():
    spec = FrameSpec((3,), torch.float16, meta_slots=2)  # 6 payload bytes -> padded to 8
    assert spec.payload_nbytes == 8 and spec.nbytes == 24
    f = spec.new_frame(Wire())
    f.fill(spec, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float16), [7, 8])
    assert f.read_meta() == [7, 8]
    assert torch.equal(f.payload, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float16))
    with pytest.raises(ValueError, match=r"frame expects \(3,\) torch.float16"):
        f.fill(spec, torch.zeros(4, dtype=torch.float16), [])
    with pytest.raises(ValueError, match="3 metadata values but the frame has 2"):
        f.fill(spec, torch.zeros(3, dtype=torch.float16), [1, 2, 3])
