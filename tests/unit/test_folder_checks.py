"""A pipeline folder checked before any rank starts (``checkpoint.folder.check_folder``): a
damaged download refused in one line naming the file and the defect; ``--dtype auto`` read from
the transformer's safetensors headers; and what each rank's share of a 14B-shaped folder needs
against one 80 GB GPU (``runtime.fit``). The CLI's own run of a damaged folder, as a user starts
it, is in tests/system/test_t2v.py."""

from __future__ import annotations

import shutil

import pytest
import torch

from ppdit import cli
from ppdit.checkpoint.folder import PipelineFolderError, check_folder
from ppdit.checkpoint.source import ModelSource
from ppdit.checkpoint.tiny import build_tiny_pipeline
from ppdit.model import build_model
from ppdit.parallel.layout import Layout
from ppdit.runtime.device import PlacementDecision
from ppdit.t2v.generate import prepare
from tests.support.pipelines import spec_for

WEIGHTS = "transformer/diffusion_pytorch_model.safetensors"


def _truncate(folder):
    path = folder / WEIGHTS
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return rf"{WEIGHTS}: truncated \({len(data) // 2:,} of {len(data):,} bytes\)"


def _bad_config(folder):
    (folder / "transformer" / "config.json").write_text('{"num_layers": 2,')
    return r"transformer/config.json: not valid JSON \(Expecting"


def _not_an_object(folder):
    (folder / "scheduler" / "scheduler_config.json").write_text("[1, 2]")
    return "scheduler/scheduler_config.json: not an object"


def _no_vae_config(folder):
    (folder / "vae" / "config.json").unlink()
    return "vae/config.json: missing"


def _no_encoder_weights(folder):
    for f in (folder / "text_encoder").glob("*.safetensors"):
        f.unlink()
    return r"text_encoder/\*\.safetensors: missing"


def _header_garbage(folder):
    path = folder / "vae" / "diffusion_pytorch_model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:8] + b"\xff" * 16 + data[24:])
    return "vae/diffusion_pytorch_model.safetensors: not safetensors"


def _header_cut(folder):
    path = folder / WEIGHTS
    path.write_bytes(path.read_bytes()[:100])
    return rf"{WEIGHTS}: truncated \(100 of at least [\d,]+ bytes\)"


DAMAGES = [_truncate, _header_cut, _bad_config, _not_an_object, _no_vae_config, _no_encoder_weights,
           _header_garbage]


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda f: f.__name__.strip("_"))
def test_a_damaged_folder_is_refused_naming_the_file(folders, tmp_path, damage):
    broken = tmp_path / "broken"
    shutil.copytree(folders["unipc"], broken)
    said = damage(broken)
    with pytest.raises(PipelineFolderError, match=said):
        check_folder(broken)
    with pytest.raises(PipelineFolderError, match=said):  # the spec reads the dtype: refused
        prepare(spec_for(broken))
    with pytest.raises(PipelineFolderError, match=said):  # an explicit dtype reads nothing
        prepare(spec_for(broken, dtype="fp32"))


def test_the_cli_prints_the_damage_in_one_line(folders, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(folders["unipc"], broken)
    said = _truncate(broken).replace("\\", "")
    code = cli.main(["generate", "--checkpoint", str(broken), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and said in err, err


def test_dtype_auto_is_the_folders_stored_dtype(folders, tmp_path):
    assert cli.parser().parse_args(["generate"]).dtype == "auto"
    assert spec_for(folders["unipc"]).dtype == "fp32"  # the tiny folder stores fp32
    bf16 = build_tiny_pipeline(tmp_path / "bf16", stored=torch.bfloat16)
    spec = spec_for(bf16)
    assert spec.dtype == "bf16" and prepare(spec).plan.source.dtype == "bf16"
    assert spec_for(bf16, dtype="fp32").dtype == "fp32"  # asked for: kept


@pytest.fixture(scope="module")
def wan14b(folders, tmp_path_factory):
    """The tiny folder with Wan 2.1-14B's transformer config: its DiT on the meta device has
    the 14B's shapes (the weights are never read, so the tiny ones do)."""
    out = tmp_path_factory.mktemp("shapes") / "wan14b"
    shutil.copytree(folders["unipc"], out)
    build_model("wan2.1-14b", device="meta").save_config(out / "transformer")
    return out


SHARED = PlacementDecision("cuda-shared", "gloo", 1, True, "4 ranks share one GPU")


def test_tp_ranks_on_one_gpu_hold_one_model_between_them(wan14b):
    """Four TP ranks each read a quarter of every block's split layers: the four shares sum to
    one 14B model (plus the unsplit parts four times) and fit 80 GB; four step-split ranks
    hold four whole copies (115 GB) and are refused with the GB named."""
    from ppdit.parallel.share import check_weights as check_fits
    from ppdit.parallel.share import weight_bytes

    source = ModelSource(folder=str(wan14b), dtype="bf16")
    whole, share = weight_bytes(source), weight_bytes(source, split={"tp": 4})
    assert whole / 1e9 == pytest.approx(28.6, rel=0.01)
    assert whole / 4 < share < 1.1 * whole / 4  # + 0.4 GB unsplit: embedders, head, norms
    for fits in (Layout(tp=4), Layout(cfg=2, ulysses=2, fsdp=True), Layout(layer=4)):
        check_fits(source, 4, SHARED, capacity=80e9, host=512e9, split=fits.split())
    with pytest.raises(ValueError, match=r"4 rank\(s\) on one GPU would hold 4 x 28\.6 GB of "
                       r"wan14b weights = 115 GB, more than its 80 GB \(each holds the whole "
                       r"DIT, in bf16\)"):
        check_fits(source, 4, SHARED, capacity=80e9, split=Layout(step=4).split())
    preset = ModelSource("wan2.1-14b", dtype="bf16")  # seeded: every rank builds it whole
    with pytest.raises(ValueError, match="each holds the whole DIT"):
        check_fits(preset, 4, SHARED, capacity=80e9, host=512e9, split=Layout(tp=4).split())


def test_the_fit_rule_splits_what_tensor_parallel_splits():
    """``rank_bytes``'s TP rule (``tensor.parallelize.tp_splits``) counts exactly the
    parameters ``parallelize_wan`` leaves a rank; FSDP keeps ceil(rows / fsdp) of a block."""
    from ppdit.parallel.share import rank_bytes
    from ppdit.parallel.tensor.parallelize import expected_tp_param_count

    model = build_model("tiny", device="meta")  # fp32: 4 bytes a parameter
    buffers = sum(b.numel() * 4 for b in model.buffers())
    for tp in (2, 4):
        assert rank_bytes(model, {"tp": tp}) == 4 * expected_tp_param_count(model, tp) + buffers
    whole = rank_bytes(model, {})
    assert whole / 2 < rank_bytes(model, {"cfg": 2, "fsdp": 2}) < whole
    assert rank_bytes(model, {"step": 4}) == whole


def test_a_dtype_that_cannot_fit_is_refused_in_one_line(wan14b, tmp_path, capsys, monkeypatch):
    """The 14B-shaped folder stores fp32 (its tiny weights): "auto" loads 57 GB a rank, and two
    step-split ranks on an 80 GB device are refused before anything loads, the GB named."""
    import ppdit.runtime.fit as fit

    monkeypatch.setattr(fit, "device_bytes", lambda decision: 80e9)
    code = cli.main(["generate", "--checkpoint", str(wan14b), "--layout", "step", "--ranks",
                     "2", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "2 x 57.2 GB of wan14b weights = 114 GB, more than its 80 GB" in err
    assert "in fp32" in err
