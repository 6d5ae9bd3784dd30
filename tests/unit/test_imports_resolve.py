"""Every ``from ppdit... import name`` in the code that runs outside the test suite's imports
(benchmarks, scripts, labs, and ppdit's own function-level imports) names something that
exists: a benchmark whose import broke in a refactor fails here, not on its next run."""

from __future__ import annotations

import ast
import importlib
import importlib.util

import pytest

from tests.conftest import ROOT

FOLDERS = ("benchmarks", "scripts", "labs", "ppdit", "tests/support")


def _ppdit_imports() -> list[tuple[str, str, str]]:
    """(file, module, name) for every ``from ppdit.x import name`` at any depth."""
    out = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                        and node.module.split(".")[0] == "ppdit"):
                    rel = str(path.relative_to(ROOT))
                    out += [(rel, node.module, a.name) for a in node.names]
    return out


IMPORTS = _ppdit_imports()


def test_the_scan_sees_the_benchmarks_function_level_imports():
    assert any(f == "benchmarks/two_hosts.py" for f, _, _ in IMPORTS)


@pytest.mark.parametrize("module", sorted({m for _, m, _ in IMPORTS}))
def test_every_ppdit_import_resolves(module):
    mod = importlib.import_module(module)
    package = hasattr(mod, "__path__")  # a package's submodule may be imported by name
    missing = [(f, n) for f, m, n in IMPORTS if m == module and n != "*" and not hasattr(mod, n)
               and not (package and importlib.util.find_spec(f"{module}.{n}"))]
    assert missing == [], f"{module} has no {missing}"
