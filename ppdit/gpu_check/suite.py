"""The GPU test suite, run as ``pytest -m gpu tests`` in a subprocess, counted from its JUnit XML.

A subprocess, not ``pytest.main`` in this process: the tests start ranks, capture CUDA graphs
and compile, and none of that may leak into the measurements that follow (memory held, a
compiled cache, a process group). Its output goes straight to the terminal; the counts come
from the XML report pytest writes, not from parsing that output. The whole process group is
ended if the suite runs past its time limit, ranks included.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from ppdit.gpu_check.env import REPO

NO_TESTS_COLLECTED = 5  # pytest's exit status when the selection is empty


def run_gpu_tests(*, timeout_s: float, root: Path = REPO, marker: str = "gpu") -> dict:
    """Run the suite; the ``tests`` section's fields (status, command, counts, reason).
    ``timeout_s``: the check's ``tests`` stage budget, or ``--tests-timeout``."""
    shown = f"pytest -m {marker} tests"
    if not (root / "tests").is_dir():
        return {"status": "skipped", "command": shown,
                "reason": f"no tests/ folder in {root}: run gpu-check from a ppdit checkout"}
    with tempfile.TemporaryDirectory(prefix="ppdit-gpu-tests-") as tmp:
        xml = Path(tmp) / "junit.xml"
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "pytest", "-m", marker, "tests", "-q",
                                 "-rfEs", f"--junitxml={xml}"], cwd=root,
                                start_new_session=True)  # its own group: ranks end with it
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _end_group(proc)
            return {"status": "error", "command": shown, **_counts(xml),
                    "reason": f"the suite ran past its {timeout_s:.0f} s limit and was stopped "
                              "(raise it with --tests-timeout)"}
        except BaseException:
            _end_group(proc)
            raise
        seconds = time.perf_counter() - start
        fields = {"command": shown, **_counts(xml)}
    if code == NO_TESTS_COLLECTED:
        return {**fields, "status": "skipped", "reason": f"no test is marked {marker!r}"}
    if code != 0:
        return {**fields, "status": "error",
                "reason": f"pytest exited with status {code} after {seconds:.0f} s"}
    return {**fields, "status": "ok"}


def parse_junit(xml: Path) -> dict:
    """passed / failed / skipped / errors from a JUnit XML file (pytest's ``--junitxml``), and
    the failed or erring tests by name (``file::test``)."""
    root = ET.parse(xml).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total = {k: sum(int(s.get(k, 0)) for s in suites)
             for k in ("tests", "failures", "errors", "skipped")}
    failed = [f"{c.get('classname', '').replace('.', '/')}.py::{c.get('name')}"
              for c in root.iter("testcase") if c.find("failure") is not None
              or c.find("error") is not None]
    return {"passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
            "failed": total["failures"], "skipped": total["skipped"], "errors": total["errors"],
            "failed_names": failed}


def _counts(xml: Path) -> dict:
    try:
        return parse_junit(xml)
    except (OSError, ET.ParseError):  # stopped before pytest wrote it
        return {"passed": None, "failed": None, "skipped": None, "errors": None,
                "failed_names": None}


def _end_group(proc: subprocess.Popen) -> None:
    """SIGTERM the suite's process group (pytest and the ranks it started), give pytest 10 s,
    then SIGKILL whatever of the group is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:  # the whole group is gone
            break
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
