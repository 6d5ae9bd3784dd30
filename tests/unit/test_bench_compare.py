"""``scripts/bench_compare.py``'s headlines: each names a benchmark that takes ``--quick`` and
``--json`` (what a compare round runs), and a pair of paths reads as a ratio of one run."""

from __future__ import annotations

import importlib.util

from tests.conftest import ROOT


def _compare():
    spec = importlib.util.spec_from_file_location("bench_compare",
                                                  ROOT / "scripts" / "bench_compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_pair_of_paths_is_a_ratio_of_one_run():
    bc = _compare()
    out = {"ms": {"funcol compiled": 120.0, "funcol": 150.0}, "b_filled": [{"x": 2}]}
    assert bc._at(out, (("ms", "funcol compiled"), ("ms", "funcol"))) == 0.8
    assert bc._at(out, ("b_filled", 0, "x")) == 2.0


def test_every_headline_names_a_benchmark_that_writes_json():
    bc = _compare()
    for bench in bc.HEADLINES:
        script = (ROOT / "benchmarks" / f"{bench}.py").read_text()
        assert '"--json"' in script and "--quick" in script, bench
