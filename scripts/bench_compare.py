"""Two commits side by side: each benchmark for the reference and the working tree, interleaved
round by round, and a verdict per headline ratio: faster, slower, or no change this machine can
see.

    .venv/bin/python scripts/bench_compare.py 6e353a7                 # make bench-compare REF=...
    .venv/bin/python scripts/bench_compare.py 6e353a7 --bench step_split --rounds 7

Why: one run of a benchmark cannot tell a 20% change from this machine's noise (the same code's
handoff measured 1.07-1.46x a bare send within an hour). Run alternately, a slow minute hits
both codes, and the per-round ratio of new to old cancels it; ``ppdit.teaching.verdict.change``
judges those ratios by the interval rule every benchmark uses.

The reference is checked out in a scratch worktree and each round runs both codes' *own*
benchmark scripts (``--quick --json``), the reference's with its own ppdit first on the path
(two versions of one package cannot share an interpreter, so a round is one process per code,
in alternating order). The headline ratios are read from the JSON by key, as every version
since the benchmarks gained ``--json`` writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from ppdit.teaching.verdict import change  # noqa: E402

# benchmark -> (headline, path into its JSON, "lower" or "higher" is better); a pair of paths
# is a ratio of two values of the same run
HEADLINES = {
    "step_split": [
        ("one request: P=2 / one device", (("a_one_request", "p2_s"),
                                           ("a_one_request", "one_device_s")), "lower"),
        ("R=8 filled / one at a time", ("b_filled", 0, "filled_vs_one_at_a_time_x"), "higher"),
        ("R=8 stream batch / batched", ("b_filled", 0, "stream_batch_vs_batched_x"), "higher"),
        ("handoff: frame / bare send", ("c_handoff", "frame_over_bare"), "lower"),
        ("handoff: frame, ms one way", ("c_handoff", "frame_ms"), "lower")],
    "layer_split": [
        ("ppdit wrap / torch GPipe", ("rows", "ppdit wrap", "vs_torch"), "higher"),
        ("ppdit flush / torch GPipe", ("rows", "ppdit flush", "vs_torch"), "higher")],
    "bringup": [("overlap / PP0", ("overlap_over_pp0",), "higher")],
    "tensor_parallel": [
        ("compiled / eager funcol TP, time", (("ms", "funcol compiled"), ("ms", "funcol")),
         "lower"),
        ("funcol TP compiled, ms", ("ms", "funcol compiled"), "lower"),
        ("funcol TP eager, ms", ("ms", "funcol"), "lower")],
    "caching": [("FBC 0.2: time / exact", ("rows", 3, "time_ratio"), "lower")],
    "experts": [("boundary cut / one device, speedup", ("speedup", "boundary cut"), "higher"),
                ("even cut / one device, speedup", ("speedup", "even cut"), "higher")],
    "launch": [("forked / spawned launch", ("forked_over_spawn",), "lower"),
               ("pooled job / spawned launch", ("pool_over_spawn",), "lower")],
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ref", help="the reference commit (any git revision)")
    ap.add_argument("--bench", default="step_split,layer_split,bringup",
                    help=f"comma-separated, of {', '.join(HEADLINES)}")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per code (>= 5 for a verdict)")
    a = ap.parse_args(argv)
    benches = a.bench.split(",")
    unknown = set(benches) - set(HEADLINES)
    if unknown:
        ap.error(f"--bench {sorted(unknown)}: the benchmarks compared are {sorted(HEADLINES)}")
    with tempfile.TemporaryDirectory(prefix="ppdit-ref-") as tmp:
        ref = Path(tmp) / "ref"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(ref), a.ref],
                       cwd=ROOT, check=True)
        try:
            for bench in benches:
                compare(bench, {"ref": ref, "new": ROOT}, a.rounds, a.ref)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(ref)], cwd=ROOT,
                           check=False)
    return 0


def compare(bench: str, trees: dict[str, Path], rounds: int, ref_name: str) -> None:
    """Both codes' headline values, round by round in alternating order; the verdicts."""
    values: dict[str, list[dict]] = {"ref": [], "new": []}
    for i in range(rounds):
        for code in (("ref", "new") if i % 2 == 0 else ("new", "ref")):
            values[code].append(run_once(bench, trees[code]))
        print(f"{bench}: round {i + 1} of {rounds} done", flush=True)
    print(f"\n{bench}: reference {ref_name} vs this tree, {rounds} interleaved rounds "
          "(medians; new / old per round)")
    for name, path, better in HEADLINES[bench]:
        old, new = ([_at(v, path) for v in values[c]] for c in ("ref", "new"))
        verdict = change([n / o for n, o in zip(new, old, strict=True)], better)
        print(f"  {name:44s} old {statistics.median(old):8.3f} | new "
              f"{statistics.median(new):8.3f} | new / old {verdict.describe()} -> "
              f"{verdict.says()}")


def run_once(bench: str, tree: Path) -> dict:
    """One quick run of ``tree``'s own benchmark, with ``tree``'s ppdit first on the path."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        env = {**os.environ, "PPDIT_BENCH_RECORD": "0",
               "PYTHONPATH": f"{tree}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        subprocess.run([sys.executable, str(tree / "benchmarks" / f"{bench}.py"), "--quick",
                        "--json", str(out)], cwd=tree, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def _at(data, path: tuple) -> float:
    """The value at ``path`` in a benchmark's JSON, or the ratio of two (a pair of paths)."""
    if path and isinstance(path[0], tuple):
        return _at(data, path[0]) / _at(data, path[1])
    for key in path:
        data = data[key]
    return float(data)


if __name__ == "__main__":
    sys.exit(main())
