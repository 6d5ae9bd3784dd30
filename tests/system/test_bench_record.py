"""The benchmarks' shared verdicts and record (``benchmarks/record.py``): a target judged on its
rounds, and one JSON line per run with the machine and the commit."""

from __future__ import annotations

import importlib.util
import json
import sys

from tests.conftest import ROOT


def _record(monkeypatch):
    """benchmarks/record.py as the benchmarks import it (their folder is a script's path)."""
    spec = importlib.util.spec_from_file_location("record", ROOT / "benchmarks" / "record.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "record", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_target_is_judged_on_its_rounds_and_the_run_is_kept(tmp_path, monkeypatch, capsys):
    record = _record(monkeypatch)
    monkeypatch.setattr(record, "RESULTS", tmp_path / "results.jsonl")
    monkeypatch.delenv("PPDIT_BENCH_RECORD", raising=False)
    rows = record.show([record.Target("frame / bare", [1.46, 1.07, 1.27, 1.20, 1.34], 1.2),
                        record.Target("overlap / PP0", [1.8, 1.7, 1.9, 1.75, 1.85], 1.5,
                                      "higher")])
    assert [r["verdict"] for r in rows] == ["inconclusive here", "OK"]
    assert "frame / bare: 1.27x (1.07-1.46, 90% interval of 5 rounds); target <= 1.2x: " \
           "inconclusive here (about" in capsys.readouterr().out
    record.keep("step_split", rows, ["--quick"])
    line = json.loads((tmp_path / "results.jsonl").read_text())
    assert line["bench"] == "step_split" and line["argv"] == ["--quick"]
    assert line["machine"]["cores"] and line["commit"]["commit"]
    assert line["targets"][1]["values"] == [1.8, 1.7, 1.9, 1.75, 1.85]


def test_a_compared_run_is_not_recorded(tmp_path, monkeypatch):
    record = _record(monkeypatch)
    monkeypatch.setattr(record, "RESULTS", tmp_path / "results.jsonl")
    monkeypatch.setenv("PPDIT_BENCH_RECORD", "0")
    record.keep("bringup", [], [])
    assert not (tmp_path / "results.jsonl").exists()


def test_rounds_are_added_while_a_verdict_is_within_reach_and_no_further(monkeypatch):
    """A ratio 3% under its bound, spread +-8%: 9 rounds leave it inconclusive, the added ones
    decide it; a ratio at its bound gets none (no settle estimate); the cap holds."""
    record = _record(monkeypatch)
    cycle = [0.87, 1.03, 0.95, 0.91, 0.99, 0.95, 0.93, 0.97, 0.95]
    calls = []

    def measure(n):
        calls.append(n)
        start = sum(calls) - n
        return {"x": [cycle[(start + i) % len(cycle)] for i in range(n)]}

    def judge(bound):
        return lambda rd: [record.Target("x", rd["x"], bound)]

    got = record.until_settled(measure, judge(0.98), 9, 40)
    assert calls[0] == 9 and len(calls) > 1 and len(got["x"]) == sum(calls) <= 40
    assert record.Target("x", got["x"], 0.98).check()["verdict"] == "OK"
    calls.clear()
    assert len(record.until_settled(measure, judge(0.95), 9, 40)["x"]) == 9  # at its bound
    calls.clear()
    assert len(record.until_settled(measure, judge(0.98), 9, 12)["x"]) == 12  # the cap
