"""The import graph of ``fsguard/``: arrows point down, and there is no circle (CONTRIBUTING, "How the house is
laid out"). Read from the source with ``ast``, imports inside functions and ``TYPE_CHECKING`` blocks included:
a lazy import that runs back up is still a circle at run time.

A new module gets a layer in ``LAYERS`` (the test fails until it has one): it may import only from lower
layers, and from its own package.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "fsguard"

# Lowest first. A module (or a package, for everything in it) may import only from lower layers.
LAYERS: list[tuple[str, ...]] = [
    ("fsguard._values", "fsguard._version", "fsguard._warn", "fsguard.waiting"),  # leaves: import nothing of fsguard
    ("fsguard.demo",),  # standard library only, besides the leaves
    ("fsguard._later", "fsguard._wrapt"),  # start-up's import helpers: a module's first import, wrapt's extension
    ("fsguard.calls",),  # one call's arguments, decoded: the only module that knows the signatures
    ("fsguard.config", "fsguard.launcher"),
    ("fsguard.state",),  # the one process state and the one at-fork hook
    ("fsguard.memory", "fsguard.mounts", "fsguard.records"),  # mounts: what each filesystem honours
    ("fsguard.evidence", "fsguard.runtime"),
    ("fsguard.world",),  # the live World the rules ask: evidence, memory and the clock
    ("fsguard.guards",),  # policy: pure decisions returning a Verdict
    ("fsguard.audit",),  # report and scan: records read with their one parser, verdicts from the guards' SCAN
    ("fsguard.locks", "fsguard.handlers", "fsguard.rmwalk"),  # mechanism below patching
    ("fsguard.failure",),  # the one failure pipeline: caller's context, rule, deferral, record
    ("fsguard.patching",),
    ("fsguard", "fsguard._boot"),  # the public functions and startup
    ("fsguard.cli",),
    ("fsguard.__main__",),  # python -m fsguard: the cli
]


def _layer(module: str) -> tuple[int, str]:
    """(layer, unit): the unit is the entry of LAYERS the module belongs to (itself, or its package)."""
    best: tuple[int, str] | None = None
    for level, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and (best is None or len(name) > len(best[1])):
                best = (level, name)
    assert best is not None, f"{module} has no layer: add it to LAYERS in tests/test_layout.py (and CONTRIBUTING)"
    return best


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """fsguard modules that ``module`` imports, anywhere in its source."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name.split(".")[0] == "fsguard")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "fsguard":
                target = node.module
            else:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in known else target)
    out.discard(module)
    return out


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {module: _imports(module, path, known) for module, path in known.items()}


def test_arrows_point_down() -> None:
    upward = []
    for module, targets in _graph().items():
        level, unit = _layer(module)
        for target in targets:
            target_level, target_unit = _layer(target)
            if target_unit == unit or (unit == "fsguard" and target_unit == "fsguard"):
                continue  # inside one package (checked for circles below)
            if target_level >= level:
                upward.append(f"{module} -> {target}")
    assert not upward, upward


def test_no_import_circle() -> None:
    graph = _graph()
    # a package's __init__ imported by its own modules is the usual Python shape, not a circle of concerns
    edges = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in graph.items()}
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> None:
        if module in path:
            raise AssertionError("import circle: " + " -> ".join([*path[path.index(module) :], module]))
        if module in done:
            return
        path.append(module)
        for target in sorted(edges.get(module, ())):
            visit(target)
        path.pop()
        done.add(module)

    for module in sorted(edges):
        visit(module)
