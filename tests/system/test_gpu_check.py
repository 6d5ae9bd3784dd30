"""``make gpu-check``'s plumbing that starts processes: git decides which runs a notebook sees,
the pytest suite it runs on a GPU box, the command line, and the unknowns' sections on CPU
ranks; the checks without a process are in tests/unit/test_gpu_check.py, the measurements in
tests/gpu (CUDA only)."""

from __future__ import annotations

import datetime as dt
import subprocess
import textwrap

import pytest
import torch

from ppdit.analysis.gpu_run_schema import (
    MEASUREMENTS,
    REAL_GENERATE,
    SYNC_PROBE,
    TESTS,
    empty_section,
)
from ppdit.analysis.gpu_runs import (
    format_report,
    load_run,
    load_runs,
)
from ppdit.gpu_check import env, run
from ppdit.gpu_check.sections import run_section
from ppdit.gpu_check.suite import run_gpu_tests
from ppdit.gpu_check.unknowns import REL_TOL, real_generate, sync_probe
from tests.support.gpu import COMMITTED


def test_notebooks_see_only_committed_runs(tmp_path):
    """A run gpu-check has just written must not change a notebook's compared output."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "old.json").write_text(COMMITTED.read_text())
    subprocess.run([*git, "add", "old.json"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "run"], cwd=tmp_path, check=True)
    (tmp_path / "new.json").write_text(COMMITTED.read_text())
    assert [r.path.name for r in load_runs(tmp_path)] == ["new.json", "old.json"]
    assert [r.path.name for r in load_runs(tmp_path, committed_only=True)] == ["old.json"]


def test_provenance_collects_what_is_knowable_and_marks_the_rest():
    p = env.provenance(command="python -m ppdit gpu-check", duration_s=12.345,
                       today=dt.date(2026, 1, 2))
    assert p["date"] == "2026-01-02" and p["duration_s"] == 12.3
    assert p["torch"] == torch.__version__ and p["python"]
    assert p["origin"].startswith("make gpu-check, 2026-01-02")
    assert p["unknown"] == env.unknown_fields(p)
    if not torch.cuda.is_available():
        assert p["gpu"] == {"name": None, "count": None, "memory_gb": None, "capability": None}
        assert {"gpu.name", "gpu.count"} <= set(p["unknown"])
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=env.REPO, capture_output=True,
                          text=True)
    if head.returncode == 0:
        assert p["git"]["commit"] == head.stdout.strip()
        assert isinstance(p["git"]["dirty"], bool)


def test_a_report_built_here_is_valid_and_reads_back(tmp_path):
    sections = {name: empty_section(spec, "skipped", "not on this machine")
                for name, spec in MEASUREMENTS.items()}
    report = run.build_report(empty_section(TESTS, "skipped", "--skip-tests was given"),
                              sections, command="python -m ppdit gpu-check", duration_s=1.0)
    first, second = run.write_report(report, tmp_path), run.write_report(report, tmp_path)
    assert second.name == first.name.replace(".json", "-2.json")  # nothing is overwritten
    back = load_run(first)
    assert back.label.endswith(report["provenance"]["origin"])
    assert run.passed(report)
    assert back.lines("vae", label=False) == ["vae: skipped: not on this machine"]
    assert "vae         skipped" in format_report(back)
    report["measurements"]["vae"]["status"] = "error"
    assert not run.passed(report)


def test_the_gpu_suite_is_counted_from_its_junit_report(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_fake.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.mark.gpu
        def test_ok(): pass

        @pytest.mark.gpu
        def test_also_ok(): pass

        @pytest.mark.gpu
        def test_broken(): assert False

        def test_not_gpu(): pass
    """))
    got = run_gpu_tests(root=tmp_path, timeout_s=120)
    assert got["status"] == "error" and "exited with status 1" in got["reason"]
    assert (got["passed"], got["failed"], got["skipped"], got["errors"]) == (2, 1, 0, 0)
    assert run_gpu_tests(root=tmp_path / "nowhere", timeout_s=120)["status"] == "skipped"


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine the check runs")
def test_make_gpu_check_without_cuda_answers_at_once_and_writes_nothing(tmp_path):
    """Where no interpreter's torch sees a GPU: one line, exit 1, well under 30 s, no file;
    the dry run lists the stages, whose budgets fit a GPU rented for ten minutes."""
    from tests.conftest import ROOT

    before = set(ROOT.joinpath("gpu_runs").iterdir())
    start = dt.datetime.now()
    run_ = subprocess.run(["scripts/gpu_check.sh"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)
    assert (dt.datetime.now() - start).total_seconds() < 30
    assert run_.returncode == 1 and "nothing was written" in run_.stderr, run_.stderr
    assert set(ROOT.joinpath("gpu_runs").iterdir()) == before
    dry = subprocess.run(["scripts/gpu_check.sh", "--dry-run"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    stages = [line.split() for line in dry.splitlines() if line.rstrip().endswith(" s")]
    assert [s[0] for s in stages] == ["tests", *MEASUREMENTS]
    assert sum(int(s[1]) for s in stages) == run.BUDGET_S <= 480


def test_the_sync_probe_on_cpu_ranks_keeping_nccls_rules_finds_the_model():
    """The probe's code on gloo ranks keeping NCCL's rules: the stream sync returns at once,
    the device-wide one waits for the late send (``nccl_rules.device_sync``): what a GPU box
    with 2 GPUs checks against the hardware."""
    got = run_section("sync_probe", SYNC_PROBE, sync_probe, "cpu", delay_s=1.0)
    assert got["status"] == "ok" and got["as_modelled"] is True, got
    assert got["devices"] == ["cpu", "cpu"] and got["backend"] == "gloo"
    assert got["stream_sync_s"] < 0.25 and 0.5 < got["device_sync_s"] < 5
    assert "the model" in got["notes"]


def test_real_generate_runs_tiny_on_cpu_ranks():
    """The real_generate section's code with the tiny presets: a random bf16 folder, one
    device, then step, layer and ring split on 2 ranks of a pool. Step and layer split run
    one device's arithmetic (bitwise); ring merges bf16 blocks (within ``REL_TOL``). CPU
    ranks keep no allocator peak: null, where a GPU box records GB."""
    got = run_section("real_generate", REAL_GENERATE, real_generate, "cpu", preset="tiny",
                      vae="tiny", video=(5, 32, 32))
    assert got["status"] == "ok", got["reason"]
    assert got["latent_shape"] == [1, 16, 2, 8, 8] and got["devices"] == ["cpu", "cpu"]
    one, step, layer, ring = got["rows"]
    assert (one["layout"], step["layout"], layer["layout"], ring["layout"]) == (
        "one device", "step-split P=2", "layer-split P=2", "ring=2")
    assert one["peak_gb"][0] > 0 and step["peak_gb"] is None
    assert step["bitwise_equal"] and layer["bitwise_equal"] and step["max_abs_diff"] == 0
    assert 0 < ring["rel_diff"] <= REL_TOL and ring["within_tol"]


def test_a_run_names_the_tree_that_ran_by_content_not_git_metadata(tmp_path):
    """A device machine's copy kept stale git metadata (issue 50): the tree hash follows the
    files as they are, tracked or not, ignoring what git ignores and the run files."""
    import subprocess

    from ppdit.gpu_check.env import tree_hash

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / ".gitignore").write_text("out/\n")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
    first = tree_hash(tmp_path)
    (tmp_path / "a.py").write_text("x = 2\n")  # changed, not committed
    changed = tree_hash(tmp_path)
    (tmp_path / "b.py").write_text("y = 1\n")  # untracked
    grown = tree_hash(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "c.txt").write_text("ignored")
    (tmp_path / "gpu_runs").mkdir()
    (tmp_path / "gpu_runs" / "run.json").write_text("{}")  # what the run itself writes
    assert len({first, changed, grown}) == 3 and tree_hash(tmp_path) == grown
    assert tree_hash(tmp_path / "not-a-checkout-at-all") is None
