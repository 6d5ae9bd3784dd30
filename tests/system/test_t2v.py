"""``ppdit generate`` end to end on the tiny pipeline folder, its processes started as a user's
run starts them: the video, timeline, trace and summary written, and where the text encoder ran
printed (the CLI's checks that start nothing are in tests/unit/test_t2v.py); a damaged folder
refused by ``python -m ppdit generate`` in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from ppdit import cli
from tests.conftest import ROOT
from tests.support.pipelines import PROMPT


def test_cli_generate_writes_the_video_and_artifacts(folders, tmp_path, capsys):
    out = tmp_path / "gen"
    code = cli.main(["generate", "--checkpoint", str(folders["unipc"]), "--prompt", PROMPT,
                     "--steps", "2", "--frames", "5", "--height", "32", "--width", "32",
                     "--text-encoder", "cpu", "--out", str(out)])
    assert code == 0
    names = {p.name for p in out.iterdir()}
    assert {"frames.png", "timeline.png", "trace.json", "summary.json"} <= names
    assert names & {"video.mp4", "video.gif"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["frames"] == 5 and summary["latent_shape"] == [1, 16, 2, 8, 8]
    printed = capsys.readouterr().out
    assert str(out) in printed
    # the text encoder's place and cost, printed and kept (offloaded to the CPU here)
    encoder = summary["text_encoder"]
    assert encoder["device"] == "cpu" and encoder["weight_bytes"] > 0
    assert f"GB of weights on cpu for {encoder['seconds']:.1f} s, freed before" in printed


def test_python_m_ppdit_refuses_a_truncated_folder_in_one_line(folders, tmp_path):
    """As a user runs it: a cut-off transformer download is one line naming the file and the
    bytes (not diffusers' OSError, minutes in), exit status 2, before any rank starts."""
    broken = tmp_path / "broken"
    shutil.copytree(folders["unipc"], broken)
    weights = broken / "transformer" / "diffusion_pytorch_model.safetensors"
    size = weights.stat().st_size
    weights.write_bytes(weights.read_bytes()[:-1234])  # the data's end cut off
    run = subprocess.run([sys.executable, "-m", "ppdit", "generate", "--checkpoint", str(broken),
                          "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=False)
    assert run.returncode == 2, run.stderr
    said = f"{weights}: truncated ({size - 1234:,} of {size:,} bytes)"
    assert run.stderr == f"ppdit generate: {said}\n"
    assert not (tmp_path / "out").exists()


def test_generate_under_torchrun_encodes_on_each_local_ranks_device(folders, tmp_path):
    """``torchrun --nproc-per-node 2 -m ppdit generate``, two local ranks on the CPU: each rank
    encodes the prompts where it computes and says where; rank 0 writes the video."""
    out = tmp_path / "gen"
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--standalone", "-m", "ppdit", "generate", "--checkpoint", str(folders["unipc"]),
         "--prompt", PROMPT, "--layout", "cfg=2", "--steps", "2", "--frames", "5",
         "--height", "32", "--width", "32", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stdout + run.stderr
    for rank in (0, 1):
        assert f"rank {rank}: text encoder: " in run.stdout and " on cpu for " in run.stdout
    assert json.loads((out / "summary.json").read_text())["frames"] == 5
