"""The P2P frame without ranks: its aligned layout, payload and metadata slots, and a named error
for a wrong tensor or metadata count (the helpers on two gloo ranks: tests/ranks/test_p2p.py)."""

from __future__ import annotations

import pytest
import torch

from ppdit.runtime.comm.wire import FrameSpec, Wire


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
