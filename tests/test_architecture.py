"""The house rules of the architecture (../shared/DESIGN.md, docs/design.md), checked on the source.

- Arrows point one way: each package imports only the packages below it (module-level and lazy imports alike).
- ``predict`` imports nothing from ``fit`` (what a forecast needs lives in ``predict``).
- No import cycle between packages.
- One roofline: a device's datasheet peak and bandwidth are turned into time only in ``predict/roofline.py``.
"""

from __future__ import annotations

import ast
import pathlib
from collections import defaultdict

ROOT = pathlib.Path(__file__).resolve().parents[1] / "src" / "traincast"
# modules every package may use: the vocabulary of the house
COMMON = {"errors", "registry", "schema", "persist", "paths"}
# each package and what it may import (directly; what those import is allowed too)
DEPENDS = {
    "store": set(),
    "workload": set(),
    "hardware": set(),
    "predict": {"workload", "hardware"},
    "measure": {"workload", "store"},
    "fit": {"measure", "predict", "store"},
    "online": {"store"},
    "plan": {"predict"},
    "serve": {"plan", "online", "predict", "store"},
    "cli": {"fit", "measure", "online", "plan", "predict", "serve", "store", "workload", "hardware"},
}


def _closure(pkg: str) -> set[str]:
    seen, todo = set(), [pkg]
    while todo:
        for dep in DEPENDS.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def _imports() -> dict[str, dict[str, set[str]]]:
    """package -> imported package -> the files that import it."""
    out: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for f in ROOT.rglob("*.py"):
        rel = f.relative_to(ROOT).parts
        pkg = rel[0][:-3] if len(rel) == 1 else rel[0]
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] == "traincast" and len(parts) > 1 and parts[1] != pkg:
                    out[pkg][parts[1]].add(str(f.relative_to(ROOT)))
    return out


def test_packages_import_only_what_is_below_them():
    bad = []
    for pkg, targets in _imports().items():
        if pkg not in DEPENDS:
            continue  # top-level modules (errors, registry, ...) and the package's own __init__/__main__
        allowed = _closure(pkg) | COMMON
        for tgt, files in targets.items():
            if tgt not in allowed:
                bad.append(f"{pkg} -> {tgt} ({', '.join(sorted(files))})")
    assert not bad, "imports against the arrows: " + "; ".join(bad)


def test_predict_imports_nothing_from_fit():
    assert "fit" not in _imports()["predict"]


def test_no_import_cycle_between_packages():
    graph = {pkg: set(t) & set(DEPENDS) for pkg, t in _imports().items() if pkg in DEPENDS}
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path + [nxt]))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for pkg in graph:
        if pkg not in state:
            visit(pkg, [pkg])


def test_one_roofline():
    """Only the roofline turns a device's datasheet rates into time: no other module reads them (the learned
    model's device features and the `gpus` table read the raw figures to show or encode them, not to time)."""
    rates = {"peak_flops_per_s", "memory_bandwidth_bytes_per_s", "fp32_tflops", "tf32_tflops", "fp16_tflops",
             "bf16_tflops", "fp32_matrix_tflops", "memory_bandwidth_gb_per_s"}
    allowed = {"predict/roofline.py", "hardware/records.py", "hardware/catalog.py", "hardware/local.py",
               "predict/opfeatures.py", "cli/commands.py"}
    users = defaultdict(set)
    for f in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in rates:
                users[str(f.relative_to(ROOT))].add(node.attr)
    assert set(users) <= allowed, {k: sorted(v) for k, v in users.items() if k not in allowed}
    # and the raw figures read by the learned model's features go through the roofline to become times
    assert "roofline_s" in (ROOT / "predict" / "opfeatures.py").read_text()
