"""With the ranks on GPUs (``PPDIT_DEVICE=cuda make lab``) no lesson stops at a reference check:
every reference a lesson compares the ranks' results with is computed where they compute.

How, without a GPU and without running the lessons (minutes each, their ranks most of it):
each reference a lesson computes, every call of ``on_ranks_device`` (or of the bare gate
``same_placement``), is evaluated here as the learner's kernel would evaluate it, while this
process sees two GPUs and ``PPDIT_DEVICE=cuda`` says to use them. Its inputs come from the
lesson itself: the statements before it that define the names it uses (and theirs, back to the
imports), in the lesson's order. "cuda" is ``tests.support.fake_cuda``: its tensors are CPU
tensors that say ``cuda:0``, so a reference computed on the device ``on_ranks_device`` hands
over comes back from it, and one computed in the kernel on the CPU meets the
``PlacementMismatch`` a learner would meet. A statement among those inputs that would start
ranks is refused: a reference must be computable from what the lesson planned, not from what
its ranks returned.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import ppdit.teaching.placement as placement
from ppdit.runtime.device import DEVICE_ENV
from ppdit.runtime.processes.pool import RankPool
from tests.conftest import ROOT
from tests.support.fake_cuda import fake_cuda

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
GATES = ("on_ranks_device", "same_placement")
# Lessons whose checks compare ranks with a reference, and the gates' calls in each (at least):
# a check that lost its gate would compare across devices in silence, so the gates are counted.
CHECKED = {"00": 1, "01": 2, "02": 2, "03": 2, "05": 1, "06": 1, "07": 1, "09": 1, "11": 1,
           "12": 2, "13": 1, "14": 1, "15": 1, "16": 1}


@dataclass
class Step:
    """One top-level statement of a lesson, with the cell it is in."""

    cell: int
    node: ast.stmt


def steps_of(path: Path) -> list[Step]:
    cells = json.loads(path.read_text())["cells"]
    return [Step(i, node) for i, c in enumerate(cells) if c["cell_type"] == "code"
            for node in ast.parse("".join(c["source"])).body]


def references(steps: list[Step]) -> list[tuple[int, ast.Call]]:
    """(index of its statement, the call) for every gate called in the lesson."""
    return [(k, node) for k, step in enumerate(steps) for node in ast.walk(step.node)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in GATES]


def used(node: ast.AST) -> set[str]:
    """Names ``node`` reads from outside itself (less those its lambdas, comprehensions and
    functions bind for themselves: an over-count only costs a statement more below)."""
    reads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx,
                                                                                    ast.Load)}
    own = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Lambda | ast.FunctionDef):
            own |= {a.arg for a in n.args.args + n.args.kwonlyargs}
        if isinstance(n, ast.FunctionDef):
            own |= {t.id for t in ast.walk(n) if isinstance(t, ast.Name)
                    and isinstance(t.ctx, ast.Store)}
        if isinstance(n, ast.comprehension):
            own |= {t.id for t in ast.walk(n.target) if isinstance(t, ast.Name)}
    return reads - own


def _targets(t: ast.expr) -> set[str]:
    """The names an assignment target binds or changes: ``x``, ``a, b``, ``x[k]``, ``x.attr``."""
    if isinstance(t, ast.Tuple | ast.List):
        return set().union(*(_targets(e) for e in t.elts))
    while isinstance(t, ast.Subscript | ast.Attribute | ast.Starred):
        t = t.value
    return {t.id} if isinstance(t, ast.Name) else set()


def defined(node: ast.stmt) -> set[str]:
    """Names a top-level statement binds or changes (``x = ..``, ``x[k] = ..``, ``for x``,
    ``with .. as x``, imports, ``def``), in its nested blocks too."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.FunctionDef | ast.ClassDef):
            names.add(n.name)
        elif isinstance(n, ast.Assign):
            names |= set().union(*(_targets(t) for t in n.targets))
        elif isinstance(n, ast.AugAssign | ast.AnnAssign | ast.For):
            names |= _targets(n.target)
        elif isinstance(n, ast.With):
            names |= set().union(set(), *(_targets(i.optional_vars) for i in n.items
                                          if i.optional_vars is not None))
    return names


def rebound(node: ast.stmt) -> set[str]:
    """Names a statement binds anew whatever they held (``x = ..``, imports, ``def``): what an
    earlier statement did to them no longer matters."""
    if isinstance(node, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.ClassDef):
        return defined(node)
    if isinstance(node, ast.Assign):
        return {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)
                and isinstance(n.ctx, ast.Store)}
    return set()


def inputs_of(steps: list[Step], k: int, call: ast.Call) -> list[int]:
    """Indices of the statements before ``steps[k]`` that ``call`` needs, in order: a backward
    slice over the lesson's top level, as it runs (straight down, cell after cell)."""
    need, keep = used(call), []
    for j in range(k - 1, -1, -1):
        node = steps[j].node
        if defined(node) & need:
            keep.append(j)
            need = (need - rebound(node)) | used(node)
    return sorted(keep)


class RanksRefused(RuntimeError):
    """A reference's inputs asked for ranks."""


@pytest.fixture
def gpu_learner(monkeypatch):
    """This process as a GPU learner's kernel: two GPUs visible, the switch on, no rank started."""
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(torch.cuda, "get_device_properties",  # what a fit check asks: an H100's
                        lambda device=None: SimpleNamespace(name="fake", total_memory=80 * 2**30))

    def refuse(pool, first):
        raise RanksRefused("a reference's inputs started ranks")

    monkeypatch.setattr(RankPool, "_start", refuse)
    seen = []  # the device of each value a gate let through
    gate = placement.same_placement

    def watched(value):
        seen.append(placement._device_of(value))
        return gate(value)

    monkeypatch.setattr(placement, "same_placement", watched)
    return seen


def check_lesson(path: Path, seen: list) -> list[str]:
    """Evaluate every reference of the lesson as a GPU learner's kernel would; the problems."""
    steps, problems = steps_of(path), []
    refs = references(steps)
    if len(refs) < CHECKED.get(path.name[:2], 0):
        problems.append(f"{len(refs)} reference(s), {CHECKED[path.name[:2]]} expected: a check "
                        "compares with a reference no gate sees")
    wanted = sorted({j for k, call in refs for j in inputs_of(steps, k, call)})
    namespace: dict = {"__name__": "__lesson__"}
    with fake_cuda():
        for j in wanted:
            where = f"{path.stem} c{steps[j].cell}"
            try:
                exec(compile(ast.Module([steps[j].node], []), where, "exec"), namespace)
            except RanksRefused:
                problems.append(f"{where}, line {steps[j].node.lineno}: a reference needs this "
                                "statement, which starts ranks: compute it from the plan")
            except Exception as err:  # any: named, with the statement it came from
                problems.append(f"{where}, line {steps[j].node.lineno}: a reference needs this "
                                f"statement, which failed: {type(err).__name__}: {err}")
        for k, call in refs:
            where = f"{path.stem} c{steps[k].cell}, line {call.lineno}"
            before = len(seen)
            try:
                eval(compile(ast.Expression(call), where, "eval"), namespace)
            except placement.PlacementMismatch as err:
                problems.append(f"{where}: a GPU learner stops here: {err}")
                continue
            except NameError as err:
                problems.append(f"{where}: {err}: a reference uses a name bound by a loop or a "
                                "rank's result; compute it from what the lesson planned")
                continue
            if seen[before:] != ["cuda"]:
                problems.append(f"{where}: the reference held no tensor on the ranks' device "
                                f"(devices seen: {seen[before:]})")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_lesson_stops_at_a_reference_check_on_gpu_ranks(path, gpu_learner):
    problems = check_lesson(path, gpu_learner)
    assert problems == [], "\n".join(problems)


def test_a_reference_computed_in_the_kernel_on_the_cpu_is_caught(tmp_path, gpu_learner):
    """The check fails for the lessons as they were (a reference computed in the kernel on the
    CPU, passed through the gate), for a compute that ignores the device it is handed, for a
    reference made inside a loop, from the ranks' results or of nothing; the device's own
    reference passes."""
    cells = [
        "from ppdit.model import build_model\nfrom ppdit.sampler import Request, SamplingConfig, "
        "generate\nfrom ppdit.teaching.placement import on_ranks_device, same_placement",
        "two = SamplingConfig(num_steps=2)\nmodel = build_model('tiny', seed=0)",
        "ref = same_placement(generate(model, Request(0, 0), sampling=two))",
        "ref = on_ranks_device(lambda device: generate(model, Request(0, 0), sampling=two))",
        "ref = on_ranks_device(lambda device: generate(build_model('tiny', seed=0, "
        "device=device), Request(0, 0), sampling=two))",
        "for r in [Request(0, 0)]:\n    ref = on_ranks_device(lambda device: r)",
        "from ppdit.runtime import launch\nfrom ppdit.runtime.processes.hello import hello\n"
        "said = launch(hello, 2)",
        "ref = on_ranks_device(lambda device: said)",
        "ref = on_ranks_device(lambda device: {})",  # nothing computed: nothing checked
    ]
    nb = {"cells": [{"cell_type": "code", "source": [c]} for c in cells]}
    (tmp_path / "99_x.ipynb").write_text(json.dumps(nb))
    problems = check_lesson(tmp_path / "99_x.ipynb", gpu_learner)
    assert [p.split(":")[0] for p in problems] == [
        "99_x c6, line 3", "99_x c2, line 1", "99_x c3, line 1", "99_x c5, line 2",
        "99_x c7, line 1", "99_x c8, line 1"], problems
    assert "which starts ranks" in problems[0]
    assert "ranks compute on cuda but this reference was computed on cpu" in problems[1]
    assert "name 'r' is not defined" in problems[3]
    assert "name 'said' is not defined" in problems[4]
    assert "no tensor on the ranks' device" in problems[5]
