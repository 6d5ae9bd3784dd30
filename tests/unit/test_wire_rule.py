"""The wire rule: every point-to-point message goes through a ``Wire`` (``ctx.wire``).

A ``Wire`` carries NCCL's rules when a gloo rank keeps them, so a message posted around it runs
on plain gloo, which forgives the orders that hang on GPUs, and every test under the rules
would still pass for it. So outside ``ppdit/runtime/comm/`` no module calls ``dist.send``,
``recv``, ``isend``, ``irecv``, ``batch_isend_irecv`` or builds a ``P2POp``, except the
baselines below, each with its reason; and no module outside ``runtime/`` names the rules'
type (algorithm code holds a wire, never the rules).
"""

from __future__ import annotations

import ast
from pathlib import Path

import ppdit

ROOT = Path(ppdit.__file__).parent
P2P = {"send", "recv", "isend", "irecv", "batch_isend_irecv", "P2POp"}
ALLOWED = {
    "analysis/measure.py": "ping_pong: the bare transport's floor, what the wire is measured "
                           "against (a benchmark of gloo / NCCL itself)",
    "parallel/layer_split/torch_baseline.py": "torch.distributed.pipelining's schedule as torch "
                                              "runs it: the baseline ppdit's executor is "
                                              "compared with",
}


def p2p_calls(tree: ast.Module) -> list[str]:
    """``dist.send(...)``-style calls and ``from torch.distributed import send``-style imports."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in P2P:
            owner = ast.unparse(node.value)
            if owner in ("dist", "torch.distributed"):
                out.append(f"line {node.lineno}: {owner}.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "torch.distributed":
            out += [f"line {node.lineno}: from torch.distributed import {a.name}"
                    for a in node.names if a.name in P2P]
    return out


def modules(inside: str, allowed: dict[str, str]):
    """(path relative to ppdit/, its syntax tree) of every module outside ``inside`` and not
    on the allow-list."""
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(inside) and rel not in allowed:
            yield rel, ast.parse(path.read_text())


def test_messages_go_through_the_wire():
    offenders = [f"{rel} {c}" for rel, tree in modules("runtime/comm/", ALLOWED)
                 for c in p2p_calls(tree)]
    assert offenders == [], ("point-to-point calls around the wire (post them with ctx.wire, "
                             "or add the module to ALLOWED with the reason):\n  "
                             + "\n  ".join(offenders))


def test_only_the_runtime_names_the_rules():
    names = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py")
                   if "NcclRules" in p.read_text() and p.relative_to(ROOT).parts[0] != "runtime")
    assert names == []


def test_the_rule_sees_a_bare_send():
    tree = ast.parse("import torch.distributed as dist\ndef f(x):\n    dist.isend(x, 1)\n")
    assert p2p_calls(tree) == ["line 3: dist.isend"]
    assert p2p_calls(ast.parse("from torch.distributed import irecv\n")) == [
        "line 1: from torch.distributed import irecv"]
    assert all(path in {p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py")}
               for path in ALLOWED)  # the allow-list names files that exist


# A wire built by hand drops the rank's rules as silently as a bare send: only the rank context
# builds one (``ctx.wire``; ``ctx.wire.bare()`` for a baseline), except these.
BUILDS_A_WIRE = {
    "analysis/measure.py": "ping_pong's bare trip keeps the tensor where it is: no staging",
    "teaching/labkit.py": "ranks run one after another in one process: no message leaves it",
}


def test_only_the_rank_context_builds_a_wire():
    offenders = [f"{rel} line {n.lineno}" for rel, tree in modules("runtime/", BUILDS_A_WIRE)
                 for n in ast.walk(tree)
                 if isinstance(n, ast.Call) and ast.unparse(n.func) == "Wire"]
    assert offenders == [], f"wires built around ctx.wire: {offenders}"
