"""``make gpu-check`` and the GPU runs it writes, checked without a GPU or a process: the schema,
the labels, the committed transcription, the provenance, the no-CUDA answer, the sections; the
measurements themselves run in the ``gpu`` tests, on a CUDA machine only."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from ppdit.analysis.gpu_run_schema import (
    LAYOUTS,
    MEASUREMENTS,
    REAL_GENERATE,
    RING_MEMORY,
    SYNC_PROBE,
    GpuRunError,
    empty_section,
)
from ppdit.analysis.gpu_runs import (
    ceiling_bound_ms,
    fmt,
    format_report,
    forward_points,
    load_run,
    load_runs,
)
from ppdit.analysis.hardware import GPUS, predict
from ppdit.cli import GPU_CHECK_SECTIONS, main
from ppdit.gpu_check import env, run
from ppdit.gpu_check.forwards import build_direct, datasheet_row, forward_row, weights_gb
from ppdit.gpu_check.sections import run_section, sig
from ppdit.gpu_check.streaming_vae import streaming_vae
from ppdit.gpu_check.suite import parse_junit
from ppdit.runtime.device import Placement
from tests.support.gpu import COMMITTED, needs_cuda

LABEL = "H100 80GB, torch 2.11+cu130, transcribed from issue 14"
CPU = Placement(torch.device("cpu"), "gloo")


# -- the committed transcription ---------------------------------------------------------------


def test_committed_report_loads_with_its_label_on_every_line():
    run_ = load_run(COMMITTED)
    assert run_.label == LABEL
    lines = [line for name in ("tests", *MEASUREMENTS) for line in run_.lines(name)]
    assert lines and all(line.endswith(f"[{LABEL}]") for line in lines)
    text = format_report(run_)
    for quoted in ("8.0 ms -> graph replay 0.94 ms", "13.5 ms -> graph replay 1.9 ms", "8.5x",
                   "7.5x", "5.5x", "first frame 50.5 ms vs full decode 3,246 ms", "14.2 GB",
                   "617 ms vs roofline lower bound 321 ms", "3,203 ms", "1,828 ms", "507 ms",
                   "122 s cold compile", "746 TFLOP/s", "2.93 TB/s", "10-12 s", "12 passed"):
        assert quoted in text, quoted


def test_committed_report_is_honest_about_what_is_unknown():
    p = load_run(COMMITTED).provenance
    assert p["source"].startswith("transcribed from issue 14")
    assert "not produced by make gpu-check" in p["source"]
    assert p["driver"] is None and p["git"]["commit"] is None and p["date"] is None
    assert {"driver", "git.commit", "date", "cuda"} <= set(p["unknown"])
    assert set(p["unknown"]) == set(env.unknown_fields(p))


def test_committed_bounds_are_the_roofline_predictions():
    for point in forward_points([load_run(COMMITTED)]):
        predicted = predict(point.model, point.bound_hardware, cfg=False).step_s * 1e3
        assert round(predicted) == point.bound_ms, point.model
        # at the datasheet's ceilings the "ceiling" bound is the same prediction
        h100 = GPUS[point.bound_hardware]
        assert ceiling_bound_ms(point.model, h100.bf16_flops / 1e12,
                                h100.mem_bw / 1e12) == pytest.approx(predicted)
        assert point.bound_ms < point.ceiling_bound_ms < point.measured_ms


def test_load_runs_reads_the_folder(tmp_path):
    (tmp_path / "a.json").write_text(COMMITTED.read_text())
    assert [r.label for r in load_runs(tmp_path)] == [LABEL]
    assert COMMITTED.name in [r.path.name for r in load_runs()]


def test_load_runs_puts_a_days_second_run_after_its_first(tmp_path):
    data = json.loads(COMMITTED.read_text())
    data["provenance"]["date"] = "2026-11-28"
    for name in ("h200-2026-11-28-2.json", "h200-2026-11-28.json", "h200-2026-11-28-10.json"):
        (tmp_path / name).write_text(json.dumps(data))
    assert [r.path.name for r in load_runs(tmp_path)] == [
        "h200-2026-11-28.json", "h200-2026-11-28-2.json", "h200-2026-11-28-10.json"]


# -- the schema: a bad file is named with the rule it breaks -----------------------------------


def _broken(change) -> dict:
    data = copy.deepcopy(json.loads(COMMITTED.read_text()))
    change(data)
    return data


def _forward0(data) -> dict:
    return data["measurements"]["forwards"]["rows"][0]


@pytest.mark.parametrize("change, names", [
    (lambda d: _forward0(d).update(measured_ms="617 ms"),
     ["measurements.forwards.rows[0].measured_ms", "rule: it must be a finite number"]),
    (lambda d: _forward0(d).update(measured_ms=-1),
     ["measured_ms is -1", ">= 0"]),
    (lambda d: d["provenance"].pop("origin"),
     ["provenance.origin is missing", "every field of the schema is present"]),
    (lambda d: d["measurements"]["vae"].update(first_frame_s=0.05),
     ["measurements.vae.first_frame_s is not a field", "misspelt"]),
    (lambda d: d.update(schema="ppdit.gpu_run/0"),
     ["schema is 'ppdit.gpu_run/0'", "schema version"]),
    (lambda d: d["measurements"]["layouts"].update(reason=None),
     ["measurements.layouts.reason is empty while status is 'not_measured'", "says why"]),
    (lambda d: d["measurements"]["device"].update(status="done"),
     ["measurements.device.status is 'done'", "one of ok, partial"]),
    (lambda d: d["provenance"].update(date="23/11/2026"),
     ["provenance.date", "YYYY-MM-DD"]),
])
def test_a_bad_run_names_the_field_and_the_rule(tmp_path, change, names):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_broken(change)))
    with pytest.raises(GpuRunError) as err:
        load_run(path)
    assert str(path) in str(err.value)
    for name in names:
        assert name in str(err.value)


def test_a_file_that_is_not_json_says_so(tmp_path):
    path = tmp_path / "cut.json"
    path.write_text(COMMITTED.read_text()[:200])
    with pytest.raises(GpuRunError, match="is not valid JSON"):
        load_run(path)


def test_numbers_print_as_recorded():
    assert [fmt(v) for v in (8.0, 0.94, 13.5, 3246, 617.0, 1827.5, 2.93, None)] == [
        "8.0", "0.94", "13.5", "3,246", "617", "1,828", "2.93", "?"]


def test_sections_start_complete():
    section = empty_section(LAYOUTS, "skipped", "--skip layouts")
    assert set(section) == set(LAYOUTS) and section["rows"] == []
    with pytest.raises(KeyError, match="not fields of this section"):
        empty_section(LAYOUTS, "ok", rowz=[])


# -- what gpu-check does without a GPU ---------------------------------------------------------


def test_gpu_check_without_cuda_says_so_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["gpu-check", "--out", str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err
    assert "gpu-check needs a CUDA GPU" in err and "nothing was written" in err
    assert not (tmp_path / "runs").exists()


def test_cli_sections_are_the_checks_sections():
    assert GPU_CHECK_SECTIONS == run.SECTIONS


def test_file_names():
    assert env.gpu_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    assert env.gpu_slug("NVIDIA GeForce RTX 4090", 2) == "2x-geforce-rtx-4090"


# -- the plumbing of the measurements ----------------------------------------------------------


def test_a_failing_or_short_of_memory_section_becomes_its_status(capsys):
    def boom():
        raise RuntimeError("the layout broke\nsecond line")

    def oom():
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 30 GiB")

    failed = run_section("layouts", LAYOUTS, boom)
    assert failed["status"] == "error" and failed["reason"] == "RuntimeError: the layout broke"
    assert "Traceback" in capsys.readouterr().err
    short = run_section("layouts", LAYOUTS, oom)
    assert short == {**short, "status": "error",  # a failure, not "skipped" (issue 50)
                     "reason": "OutOfMemoryError: CUDA out of memory. Tried to allocate 30 GiB"}
    partial = run_section("layouts", LAYOUTS, lambda: {"status": "partial", "reason": "SP: x",
                                                       "world_size": 2})
    assert partial["status"] == "partial" and partial["world_size"] == 2
    assert partial["seconds"] is not None


def test_junit_counts(tmp_path):
    xml = tmp_path / "j.xml"
    xml.write_text('<testsuites><testsuite tests="7" failures="1" errors="1" skipped="2">'
                   '<testcase classname="tests.gpu.test_a" name="test_b"><failure/></testcase>'
                   '<testcase classname="tests.gpu.test_a" name="test_c"><error/></testcase>'
                   '<testcase classname="tests.gpu.test_a" name="test_d"/>'
                   "</testsuite></testsuites>")
    assert parse_junit(xml) == {"passed": 3, "failed": 1, "skipped": 2, "errors": 1,
                                "failed_names": ["tests/gpu/test_a.py::test_b",
                                                 "tests/gpu/test_a.py::test_c"]}


def test_models_built_on_the_device_keep_diffusers_fp32_modules():
    net = build_direct("tiny", "cpu")
    keep = set(net._keep_in_fp32_modules)
    for name, p in net.named_parameters():
        expected = torch.float32 if keep & set(name.split(".")) else torch.bfloat16
        assert p.dtype == expected, name
    assert torch.get_default_dtype() == torch.float32  # restored


def test_without_memory_the_big_sections_skip_with_a_reason():
    row = forward_row("wan2.1-14b", CPU, None)  # on the CPU, "free GPU memory" is 0
    assert row["status"] == "skipped" and "GB of bf16 weights" in row["reason"]
    assert weights_gb("wan2.1-14b") == pytest.approx(28.57, abs=0.01)
    from ppdit.gpu_check.forwards import wan_forwards

    assert wan_forwards(CPU)["status"] == "skipped"
    assert streaming_vae(CPU)["status"] == "skipped"


def test_one_failing_model_leaves_the_others_measured(monkeypatch):
    from ppdit.gpu_check import forwards

    def fake_forward(model, placement):
        if model == "wan2.1-14b":
            raise RuntimeError("kernel failed")
        return 600.04, int(1.9e9)  # ms, the allocator's peak above the weights

    monkeypatch.setattr(forwards, "free_gb", lambda: 1000.0)
    monkeypatch.setattr(forwards, "_time_forward", fake_forward)
    got = forwards.wan_forwards(CPU, {"matmul_tflops": 746, "copy_tb_s": 2.93})
    ok, failed = got["rows"]
    assert got["status"] == "partial" and "wan2.1-14b: RuntimeError: kernel failed" in got["reason"]
    assert ok["status"] == "ok" and ok["measured_ms"] == 600.0
    assert ok["bound_ms"] is None  # no datasheet row for a CPU
    assert ok["ceiling_bound_ms"] == pytest.approx(sig(ceiling_bound_ms("wan2.1-1.3b", 746, 2.93)))
    assert failed["status"] == "error" and failed["measured_ms"] is None
    # the memory model's activations beside the allocator's peak (1.71 GB for 1.3B at 480p)
    assert ok["activation_peak_gb"] == 1.9 and ok["activation_model_gb"] == pytest.approx(1.713)
    assert ok["activation_ratio"] == pytest.approx(1.9 / 1.7125, rel=1e-3)


def test_datasheet_rows_only_for_exact_parts():
    assert datasheet_row("NVIDIA H100 80GB HBM3") == "H100 SXM"
    assert datasheet_row("NVIDIA H100 PCIe") is None
    assert all(row in GPUS for row in ("H100 SXM", "H200 SXM", "RTX 4090", "RTX A5000"))


def test_rounding():
    assert [sig(617.345), sig(0.94123), sig(3246.78), sig(0.0)] == [617.3, 0.9412, 3247.0, 0.0]


def test_plot_of_gpu_forwards():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ppdit.viz.roofline import plot_gpu_forwards

    axes = plot_gpu_forwards(forward_points([load_run(COMMITTED)]))
    assert len(axes) == 2 and LABEL in axes[0].get_title(loc="left")
    assert len(axes[0].patches) == 4 and len(axes[1].patches) == 3  # 14B: no compiled run
    plt.close("all")
    with pytest.raises(ValueError, match="no measured GPU forward"):
        plot_gpu_forwards([])


# -- on a GPU: the measurements themselves, small ----------------------------------------------


@pytest.mark.gpu
@needs_cuda
def test_gpu_ceilings_and_graph_replay_measure():
    from ppdit.gpu_check.kernels import device_ceilings, graph_replay

    gpu = Placement(torch.device("cuda", 0), "nccl")
    ceilings = device_ceilings(gpu, n=2048, copy_gb=0.25)
    assert ceilings["matmul_tflops"] > 0 and ceilings["copy_tb_s"] > 0
    rows = graph_replay(gpu, presets=("tiny",), steps=4)["rows"]
    assert rows[0]["eager_ms"] > 0 and rows[0]["graph_ms"] > 0


@pytest.mark.gpu
@needs_cuda
def test_gpu_streaming_vae_is_bitwise_and_measured():
    gpu = Placement(torch.device("cuda", 0), "nccl")
    got = streaming_vae(gpu, (1, 16, 3, 16, 16), preset="tiny", needs_gb=0.5)
    assert got["bitwise_equal"] is True
    assert 0 < got["first_frame_ms"] <= got["stream_total_ms"]
    assert {p["mode"] for p in got["peaks"]} == {"full", "stream"}


@pytest.mark.gpu
@needs_cuda
def test_gpu_direct_build_runs_a_bf16_forward():
    net = build_direct("tiny", "cuda")
    x = torch.randn(1, 16, 5, 16, 16, device="cuda", dtype=torch.bfloat16)
    text = torch.randn(1, 8, 32, device="cuda", dtype=torch.bfloat16)
    with torch.inference_mode():
        out = net(hidden_states=x, timestep=torch.tensor([500.0], device="cuda"),
                  encoder_hidden_states=text, return_dict=False)[0]
    assert out.shape == x.shape and torch.isfinite(out.float()).all()


@pytest.mark.parametrize("statuses, ok", [
    ({"launch": "ok", "layouts": "ok"}, True),
    ({"launch": "ok", "layouts": "skipped"}, True),  # too little memory is not a failure
    ({"launch": "ok", "layouts": "partial"}, False),  # one layout erred, others ran
    ({"launch": "error", "layouts": "ok"}, False),
])
def test_a_section_that_partly_failed_fails_the_check(statuses, ok):
    from ppdit.gpu_check.run import passed

    report = {"tests": {"status": "ok"},
              "measurements": {k: {"status": v} for k, v in statuses.items()}}
    assert passed(report) is ok
    assert passed({**report, "tests": {"status": "error"}}) is False


def test_rows_of_ranks_sharing_a_device_are_labelled_time_sliced():
    from ppdit.gpu_check.ranks import time_sliced

    assert time_sliced(["cuda:0", "cuda:1"]) == ""
    assert time_sliced(["cuda:0", "cuda:0"]) == "(time-sliced: 2 ranks on one GPU)"
    assert time_sliced(["cpu", "cpu"]) == "(time-sliced: 2 ranks on the CPU)"


def test_a_stage_that_would_overrun_the_budget_is_skipped_with_the_reason():
    import time

    from ppdit.gpu_check import run

    now = time.perf_counter()
    assert run._time_left("tests", now) is None
    assert run._time_left("forwards", now - 450) == "30 s of the 480 s left; it needs 40 s"


def test_the_gpu_record_says_what_ran_and_what_did_not():
    import copy

    from ppdit.analysis.gpu_runs import GpuRun, load_run, record
    from tests.conftest import ROOT

    assert record([]) == "GPU record (gpu_runs/): nothing has run on a GPU yet."
    run = load_run(ROOT / "gpu_runs" / "h100-issue14-report.json")
    assert record([run]).endswith("multi-rank CUDA: not yet run; NCCL: not yet run.")
    data = copy.deepcopy(run.data)
    data["measurements"]["layouts"].update(status="ok", devices=["cuda:0", "cuda:0"],
                                           backend="gloo")
    assert record([GpuRun(run.path, data)]).endswith(
        f"multi-rank CUDA: gloo sharing one GPU in {run.path.name}; NCCL: not yet run.")
    data["measurements"]["layouts"].update(devices=["cuda:0", "cuda:1"], backend="nccl")
    data["tests"].update(passed=30, failed=1, failed_names=["tests/gpu/test_a.py::test_b"])
    assert record([GpuRun(run.path, data)]).endswith(
        ": 30 passed, 1 failed (tests/gpu/test_a.py::test_b); "
        f"multi-rank CUDA: nccl in {run.path.name}.")


# -- the unknowns (gpu_check.unknowns): their code on the CPU, tiny ---------------------------


def test_ring_memory_runs_every_ranks_ring_and_meets_the_model_and_plain_attention():
    """Every rank's real ring loop, its hops served from memory: together they equal plain
    attention over the whole sequence (a block served wrong would not), and each rank's peak
    is the memory model's, here counted as live tensor bytes."""
    from ppdit.gpu_check.unknowns import ring_memory
    from ppdit.parallel.sequence.ring import RING_TOL
    from tests.conftest import MODEL_TOL

    got = run_section("ring_memory", RING_MEMORY, ring_memory, CPU, ("tiny",), ring=3, frames=1,
                      dtype="fp32")
    [row] = got["rows"]
    assert got["status"] == "ok" and (row["tokens"], row["heads"], got["ring"]) == (1560, 4, 3)
    assert abs(row["ratio"] - 1) < MODEL_TOL and row["max_abs_diff"] < RING_TOL["atol"]
    bf16 = ring_memory(CPU, ("tiny",), frames=1)["rows"][0]
    assert abs(bf16["ratio"] - 1) < MODEL_TOL and bf16["max_abs_diff"] < 2e-2  # bf16's 2^-8


def test_the_random_folder_is_stored_in_bf16(tmp_path):
    from ppdit.gpu_check.unknowns import build_random_folder
    from ppdit.t2v.spec import stored_dtype

    folder = build_random_folder(tmp_path / "f", "tiny", "tiny", torch.device("cpu"))
    assert stored_dtype(str(folder)) == "bf16"
    assert {"transformer", "vae", "text_encoder", "tokenizer", "scheduler"} <= {
        p.name for p in folder.iterdir()}


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="with 2 GPUs the probe runs")
def test_the_sync_probe_needs_two_gpus_and_says_so():
    from ppdit.gpu_check.unknowns import sync_probe

    got = run_section("sync_probe", SYNC_PROBE, sync_probe)
    assert got["status"] == "skipped" and got["reason"].startswith("needs 2 GPUs (NCCL)")


def test_a_rank_off_cuda_has_no_allocator_peak():
    from types import SimpleNamespace

    from ppdit.gpu_check.sections import rank_peak_gb

    assert rank_peak_gb(SimpleNamespace(placement=CPU, device=CPU.device)) is None


def _with_unknowns() -> dict:
    """The committed run with the three unknowns measured (made-up numbers)."""
    data = copy.deepcopy(json.loads(COMMITTED.read_text()))
    row = dict.fromkeys(REAL_GENERATE["rows"][0])
    data["measurements"].update(
        sync_probe=empty_section(SYNC_PROBE, "ok", world_size=2, devices=["cuda:0", "cuda:1"],
                                 backend="nccl", delay_s=2.0, stream_sync_s=0.00012,
                                 device_sync_s=2.01, as_modelled=True),
        ring_memory=empty_section(RING_MEMORY, "ok", ring=2, rows=[{
            "model": "wan2.1-1.3b", "dtype": "bf16", "tokens": 32760, "heads": 12,
            "head_dim": 128, "peak_gb": 1.2, "model_gb": 1.1, "ratio": 1.09,
            "max_abs_diff": 0.0039}]),
        real_generate=empty_section(
            REAL_GENERATE, "partial", "ring=2: RuntimeError: boom", model="wan2.1-1.3b",
            latent_shape=[1, 16, 21, 60, 104], steps=2, rows=[
                {**row, "layout": "one device", "status": "ok", "seconds": 9.5,
                 "peak_gb": [7.1]},
                {**row, "layout": "step-split P=2", "status": "ok", "seconds": 21.0,
                 "peak_gb": [5.2, 5.3], "bitwise_equal": True, "max_abs_diff": 0.0,
                 "rel_diff": 0.0, "within_tol": True},
                {**row, "layout": "ring=2", "status": "error",
                 "reason": "RuntimeError: boom"}]))
    return data


def test_the_unknowns_read_back_as_sentences_and_count_as_multi_rank_cuda():
    from ppdit.analysis.gpu_run_schema import check_report
    from ppdit.analysis.gpu_runs import GpuRun, record

    data = _with_unknowns()
    check_report(data)
    run_ = GpuRun(COMMITTED, data)
    text = format_report(run_)
    for quoted in ("stream sync 0.00012 s, device-wide sync 2.01 s (as ppdit assumes)",
                   "wan2.1-1.3b's shape (32,760 tokens, 12 x 128, bf16): peak 1.2 GB vs the "
                   "model's 1.1 GB (1.09x)",
                   "step-split P=2: ok, 21.0 s, peak 5.2 / 5.3 GB per rank; vs one device: "
                   "bitwise True", "ring=2: error, ? s, peak ? GB per rank",
                   "real_generate: partial: ring=2: RuntimeError: boom"):
        assert quoted in text, quoted
    assert record([run_]).endswith(f"multi-rank CUDA: nccl in {COMMITTED.name}.")
    data["measurements"]["sync_probe"]["as_modelled"] = False
    assert "(NOT as ppdit assumes)" in format_report(GpuRun(COMMITTED, data))


@pytest.mark.parametrize("change, names", [
    (lambda m: m["real_generate"]["rows"][2].update(reason=None),
     ["measurements.real_generate.rows[2].reason is empty while status is 'error'"]),
    (lambda m: m["real_generate"]["rows"][1].update(peak_gb=["5.2 GB"]),
     ["rows[1].peak_gb", "a list of finite numbers >= 0 (one per rank)"]),
    (lambda m: m["sync_probe"].update(as_modelled="yes"), ["as_modelled", "true or false"]),
])
def test_a_bad_unknowns_section_names_the_field_and_the_rule(change, names):
    from ppdit.analysis.gpu_run_schema import check_report

    data = _with_unknowns()
    change(data["measurements"])
    with pytest.raises(GpuRunError) as err:
        check_report(data)
    for name in names:
        assert name in str(err.value)
