"""The one placement decision, for every kind of machine (GPUs counted by a stand-in)."""

from __future__ import annotations

import pytest
import torch

from ppdit.runtime.device import DEVICE_ENV, decide_placement


@pytest.fixture
def gpus(monkeypatch):
    """``gpus(n)``: make this process see n CUDA GPUs (and set_device a no-op)."""
    monkeypatch.delenv(DEVICE_ENV, raising=False)

    def see(n: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)

    return see


def test_no_gpu_means_cpu_and_gloo(gpus):
    gpus(0)
    d = decide_placement(2)
    assert (d.kind, d.backend, d.staged) == ("cpu", "gloo", False)
    assert "no CUDA GPU is visible" in d.reason
    assert d.for_rank(1).device == torch.device("cpu")


def test_a_gpu_per_rank_means_nccl(gpus):
    gpus(4)
    d = decide_placement(2)
    assert (d.kind, d.backend, d.staged) == ("cuda", "nccl", False)
    assert [d.for_rank(r).device for r in range(2)] == [torch.device("cuda", r) for r in (0, 1)]


def test_ranks_share_a_gpu_over_gloo_with_staging(gpus):
    gpus(1)
    d = decide_placement(2)
    assert (d.kind, d.backend, d.staged, d.gpus) == ("cuda-shared", "gloo", True, 1)
    assert [d.for_rank(r).device for r in range(2)] == [torch.device("cuda", 0)] * 2
    assert "staged through pinned host buffers" in d.reason
    gpus(2)  # 3 ranks on 2 GPUs: round-robin
    assert [decide_placement(3).for_rank(r).device.index for r in range(3)] == [0, 1, 0]


def test_requests_that_cannot_work_say_why(gpus):
    gpus(1)
    with pytest.raises(ValueError, match="NCCL refuses two ranks on one GPU"):
        decide_placement(2, backend="nccl")
    with pytest.raises(ValueError, match="gloo moves only host memory"):
        decide_placement(2, stage=False)
    gpus(0)
    with pytest.raises(ValueError, match="device='cuda' but no CUDA GPU is visible"):
        decide_placement(2, device="cuda")
    with pytest.raises(ValueError, match="backend='nccl' needs CUDA GPUs"):
        decide_placement(2, backend="nccl")
    with pytest.raises(ValueError, match="device='tpu' is not one of"):
        decide_placement(2, device="tpu")


def test_the_cpu_can_be_asked_for_and_staging_forced(gpus, monkeypatch):
    gpus(8)
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    d = decide_placement(2)
    assert (d.kind, d.backend) == ("cpu", "gloo") and DEVICE_ENV in d.reason
    forced = decide_placement(2, stage=True)
    assert forced.staged and forced.for_rank(0).staged


def test_weights_that_cannot_fit_are_refused_with_the_sizes():
    """14B in bf16 is 28.6 GB: two ranks fit on one 80 GB GPU, three do not."""
    from ppdit.checkpoint.source import ModelSource
    from ppdit.parallel.share import check_weights as check_fits
    from ppdit.parallel.share import weight_bytes
    from ppdit.runtime.device import PlacementDecision

    big = ModelSource("wan2.1-14b", dtype="bf16")
    assert weight_bytes(big) / 1e9 == pytest.approx(28.6, rel=0.01)
    shared = PlacementDecision("cuda-shared", "gloo", 1, True, "ranks share one GPU")
    check_fits(big, 2, shared, capacity=80e9, host=512e9)
    with pytest.raises(ValueError, match=r"3 rank\(s\) on one GPU would hold 3 x 28\.6 GB"):
        check_fits(big, 3, shared, capacity=80e9)
    own = PlacementDecision("cuda", "nccl", 3, False, "a GPU each")
    check_fits(big, 3, own, capacity=80e9, host=512e9)  # one copy per GPU


def test_ranks_that_would_build_more_than_the_hosts_ram_are_refused():
    """Each whole-model GPU rank builds its weights on the host first (issue 50): four 14B
    bf16 ranks hold 115 GB of host RAM at once, more than a 64 GB host, though each GPU fits."""
    from ppdit.checkpoint.source import ModelSource
    from ppdit.parallel.share import check_weights as check_fits
    from ppdit.runtime.device import PlacementDecision

    big, four = ModelSource("wan2.1-14b", dtype="bf16"), PlacementDecision(
        "cuda", "nccl", 4, False, "a GPU each")
    check_fits(big, 4, four, capacity=80e9, host=128e9)
    with pytest.raises(ValueError, match=r"4 rank\(s\) on this host would each build 28\.6 GB "
                                         r".* 115 GB at once, more than the host's 64 GB"):
        check_fits(big, 4, four, capacity=80e9, host=64e9)


def test_a_layout_refuses_before_any_rank_starts(monkeypatch):
    import ppdit.runtime.fit as fit
    from ppdit.parallel.step_split.plan import make_plan
    from ppdit.parallel.step_split.run import run_step_splits

    monkeypatch.setattr(fit, "device_bytes", lambda decision: 1000)  # a 1 kB device
    with pytest.raises(ValueError, match="more than its 1e-06 GB"):
        run_step_splits({"p2": make_plan(2, 1)}, rounds=1)


def test_cpu_parts_under_torchrun_take_the_ranks_share_of_the_cores(monkeypatch):
    """torchrun sets one thread per rank; encoding and decoding on the CPU take
    cores / local ranks instead, and the rank's count comes back after."""
    import torch

    from ppdit.runtime.device import Placement, cpu_share

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        # outside torchrun the caller's count stays: its own references run at that count,
        # and MKL's sums follow it (issue 49)
        with cpu_share(Placement(torch.device("cpu"), "gloo")) as n:
            assert n == 1
        for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "localhost")):
            monkeypatch.setenv(name, value)
        with cpu_share(Placement(torch.device("cpu"), "gloo")) as n:
            assert n == 4 and torch.get_num_threads() == 4
        assert torch.get_num_threads() == 1
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
        with cpu_share(Placement(torch.device("cpu"), "gloo")) as n:
            assert n == 1
    finally:
        torch.set_num_threads(before)


def test_under_torchrun_each_local_rank_encodes_on_its_own_device(monkeypatch):
    """``generate``'s text encoder and VAE go where the local rank computes: torchrun's
    LOCAL_RANK picks the GPU (eight umT5 copies on cuda:0 would not fit an 80 GB GPU)."""
    import torch

    from ppdit.runtime.device import process_placement

    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.delenv("PPDIT_DEVICE", raising=False)
    assert process_placement().device == torch.device("cuda", 0)  # no torchrun: the first
    for key, value in {"RANK": "6", "WORLD_SIZE": "8", "MASTER_ADDR": "node0",
                       "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4"}.items():
        monkeypatch.setenv(key, value)
    assert process_placement().device == torch.device("cuda", 2)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # 4 local ranks share a GPU
    assert process_placement().device == torch.device("cuda", 0)
    assert process_placement("cpu").device == torch.device("cpu")
    assert chosen == [torch.device("cuda", i) for i in (0, 2, 0)]


def test_a_lesson_keeps_its_ranks_on_the_cpu_unless_asked_and_says_so(gpus, capsys):
    """On a GPU box a lesson's ranks stay on the CPU (its committed outputs' placement), and
    its first line says where they compute."""
    from ppdit.teaching.placement import SWITCH, where_ranks_compute

    gpus(2)
    where_ranks_compute()
    out = capsys.readouterr().out
    assert out.startswith("Ranks compute on the CPU") and SWITCH in out


def test_a_rank_result_is_never_compared_with_a_reference_from_another_device(gpus, monkeypatch,
                                                                              capsys):
    """The learner asked for GPUs: a reference computed in the kernel on the CPU is refused,
    named, instead of a bitwise check printing False; on one placement it passes through."""
    from ppdit.teaching.placement import PlacementMismatch, same_placement, where_ranks_compute

    gpus(1)
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    where_ranks_compute()
    with pytest.raises(PlacementMismatch, match="ranks compute on cuda but this reference "
                                                "was computed on cpu"):
        same_placement({0: torch.zeros(2), 1: [torch.ones(1)]})
    assert "Ranks compute on GPUs" in capsys.readouterr().out
    assert same_placement(3.0) == 3.0  # no tensor, nothing computed on a device
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    refs = {0: torch.zeros(2)}
    assert same_placement(refs) is refs


def test_a_reference_is_computed_on_the_device_the_ranks_use(gpus, monkeypatch):
    """``on_ranks_device`` hands ``compute`` the ranks' kind of device: on the CPU the value
    comes back untouched (the committed outputs' bits); with GPU ranks a compute that ignores
    the device and stays on the CPU is refused. (Every lesson's references on fake CUDA:
    tests/book/test_lessons_on_gpu_ranks.py.)"""
    from ppdit.teaching.placement import PlacementMismatch, on_ranks_device

    gpus(2)
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    given, x = [], torch.ones(3)
    assert on_ranks_device(lambda device: given.append(device) or {"x": [x]})["x"][0] is x
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    with pytest.raises(PlacementMismatch, match="ranks compute on cuda but this reference "
                                                "was computed on cpu"):
        on_ranks_device(lambda device: given.append(device) or torch.zeros(2))
    assert given == [torch.device("cpu"), torch.device("cuda")]


def test_a_model_without_blocks_counts_whole():
    """The lessons' dummy DiT has no ``blocks``: its weights count whole under any layout
    (lesson 01's step split checks the fit before its ranks start)."""
    from ppdit.checkpoint.source import ModelSource
    from ppdit.parallel.share import rank_bytes, weight_bytes

    model = ModelSource("dummy").dit("meta")
    whole = sum(t.numel() * t.element_size() for t in model.parameters())
    assert rank_bytes(model, {"layer": 2, "tp": 2}) >= whole > 0
    assert weight_bytes(ModelSource("dummy"), split={"step": 2}) >= whole
