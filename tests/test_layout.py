"""The package is a map: no import cycles, pictures only in viz/, no global state changed.

The import graph is read from the source (module-level ``import`` / ``from ... import``
statements, outside ``if TYPE_CHECKING:``), so a cycle is caught whether or not Python's
import order happens to tolerate it today.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import ppdit

ROOT = Path(ppdit.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_level_imports(tree: ast.Module) -> list[str]:
    out = []
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                break
            if isinstance(sub, ast.Import):
                out += [a.name for a in sub.names]
            elif isinstance(sub, ast.ImportFrom) and sub.module and sub.level == 0:
                out.append(sub.module)
                out += [f"{sub.module}.{a.name}" for a in sub.names]
    return out


def import_graph() -> dict[str, set[str]]:
    """ppdit module -> the ppdit modules it imports at module level."""
    files = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        targets = _module_level_imports(ast.parse(path.read_text()))
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]


def test_each_layout_is_a_folder():
    for layout in ("step_split", "layer_split", "tensor", "sequence", "decode_overlap"):
        assert (ROOT / "parallel" / layout / "__init__.py").exists(), layout
    flat = sorted(p.name for p in (ROOT / "parallel").glob("*.py"))
    assert flat == ["__init__.py", "compare.py", "partition.py", "pp_tp.py"]


def test_pictures_only_in_viz():
    for path in ROOT.rglob("*.py"):
        if path.parent.name == "viz":
            continue
        imported = [a.name for n in ast.walk(ast.parse(path.read_text()))
                    if isinstance(n, ast.Import) for a in n.names]
        imported += [n.module for n in ast.walk(ast.parse(path.read_text()))
                     if isinstance(n, ast.ImportFrom) and n.module]
        drawing = {m for m in imported if m.split(".")[0] in ("matplotlib", "ipywidgets")}
        assert not drawing, f"{path} draws: pictures belong in ppdit/viz/"
    assert not list(ROOT.rglob("*_plots.py"))


ENV_WRITE = re.compile(r"os\.environ\[[^\]]+\]\s*=(?!=)|os\.environ\.(update|setdefault)|putenv")


def test_library_code_changes_no_global_state():
    for path in ROOT.rglob("*.py"):
        text = path.read_text()
        assert "matplotlib.use(" not in text, path
        if path.name != "compile_cache.py":  # the one documented environment write
            assert not ENV_WRITE.search(text), f"{path} writes os.environ"
