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
    # leaves: import nothing of fsguard
    ("fsguard._values", "fsguard._version", "fsguard._warn", "fsguard.waiting", "fsguard.notefile"),
    ("fsguard.demo",),  # standard library only, besides the leaves
    ("fsguard._later", "fsguard._wrapt"),  # start-up's import helpers: a module's first import, wrapt's extension
    ("fsguard.operations",),  # the one table of the guarded operations (signatures, targets, rules, sharing)
    ("fsguard.calls",),  # one call's arguments, decoded by the operations' signatures
    ("fsguard.config", "fsguard.launcher"),
    ("fsguard.state",),  # the one process state and the one at-fork hook
    ("fsguard.callers",),  # who called: the standard library's own business (frame questions, no import)
    ("fsguard.tokens",),  # a job's change tokens: whether its journals changed since a process last looked
    ("fsguard.memory", "fsguard.journal", "fsguard.mounts", "fsguard.records"),  # mounts: what each filesystem honours
    ("fsguard.evidence", "fsguard.runtime"),
    ("fsguard.world",),  # the live World the rules ask: evidence, memory and the clock
    ("fsguard.guards",),  # policy: pure decisions returning a Verdict
    ("fsguard.audit",),  # report and scan: records read with their one parser, verdicts from the guards' SCAN
    (
        "fsguard.locks",
        "fsguard.oracle",
        "fsguard.rmwalk",
    ),  # mechanism below patching (oracle: would the error end its thread)
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


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
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


def _graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    known = _modules(package)
    return {module: _imports(module, path, known) for module, path in known.items()}


def test_arrows_point_down() -> None:
    upward = _upward(_graph())
    assert not upward, upward


def _upward(graph: dict[str, set[str]]) -> list[str]:
    upward = []
    for module, targets in graph.items():
        level, unit = _layer(module)
        for target in targets:
            target_level, target_unit = _layer(target)
            if target_unit == unit or (unit == "fsguard" and target_unit == "fsguard"):
                continue  # inside one package (checked for circles below)
            if target_level >= level:
                upward.append(f"{module} -> {target}")
    return upward


def test_no_import_circle() -> None:
    _check_no_circle(_graph())


def _check_no_circle(graph: dict[str, set[str]]) -> None:
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


# --- the house's size and state rules (issue 36), read from the source with ``ast`` -------------------------

MAX_FUNCTION_LINES = 60
MAX_CLASS_ATTRIBUTES = 12
STATE_MODULE = "fsguard.state"  # the one module that keeps process state (its docstring says so)
# The one exception, with its reason. The tests assert that what breaks a rule is exactly this, so a new offender
# fails, and so does an exception whose reason went away.
EXCEPTIONS: dict[str, str] = {
    "state fsguard._boot._started": (
        "start-up's one mark (whether start ran, and from which file): importing fsguard.state there would cost "
        "about 2 ms in every interpreter started with FSGUARD=1, active or not"
    ),
}
# Methods that change their object in place (list, dict, set, deque): called on a module-level name, they make it
# state.
MUTATORS = frozenset(
    (
        "add",
        "append",
        "appendleft",
        "clear",
        "discard",
        "extend",
        "extendleft",
        "insert",
        "pop",
        "popitem",
        "popleft",
        "remove",
        "setdefault",
        "update",
    )
)
# Constructors of objects that are state by nature, whatever is done with them afterwards.
STATEFUL = frozenset(("local", "WeakSet", "WeakValueDictionary", "WeakKeyDictionary"))


def _trees(package: Path = PACKAGE) -> dict[str, ast.Module]:
    return {module: ast.parse(path.read_text()) for module, path in _modules(package).items()}


def _functions(tree: ast.AST, prefix: str) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method, nested ones included, with its qualified name."""
    found: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append((f"{prefix}.{node.name}", node))
            found.extend(_functions(node, f"{prefix}.{node.name}"))
        elif isinstance(node, ast.ClassDef):
            found.extend(_functions(node, f"{prefix}.{node.name}"))
        else:
            found.extend(_functions(node, prefix))
    return found


def _classes(tree: ast.AST, prefix: str) -> list[tuple[str, ast.ClassDef]]:
    found: list[tuple[str, ast.ClassDef]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            found.append((f"{prefix}.{node.name}", node))
    return found


def _attributes(cls: ast.ClassDef) -> set[str]:
    """A class's attributes: names in ``__slots__``, annotations in its body, and ``self.X`` assigned (or
    annotated) in its own methods (not in classes nested in it)."""
    names: set[str] = set()
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            if isinstance(node.value, (ast.Tuple, ast.List, ast.Set)):
                names.update(
                    e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
                )
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.args.args:
            me = node.args.args[0].arg
            for inner in ast.walk(node):
                targets: list[ast.expr] = []
                if isinstance(inner, ast.Assign):
                    targets = [t for target in inner.targets for t in _unpacked(target)]
                elif isinstance(inner, (ast.AnnAssign, ast.AugAssign)):
                    targets = [inner.target]
                for target in targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == me
                    ):
                        names.add(target.attr)
    return names


def _unpacked(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [t for element in target.elts for t in _unpacked(element)]
    return [target]


def _module_names(tree: ast.Module) -> dict[str, ast.expr | None]:
    """Names bound at module level by assignment (not imports, functions or classes), with their value."""
    bound: dict[str, ast.expr | None] = {}

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    for t in _unpacked(target):
                        if isinstance(t, ast.Name):
                            bound[t.id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                bound[node.target.id] = node.value
            elif isinstance(node, (ast.If, ast.Try)):  # ``if TYPE_CHECKING: ... else: ...``, ``try: import``
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(tree.body)
    return bound


def _called_name(value: ast.expr | None) -> str | None:
    if isinstance(value, ast.Call):
        func = value.func
        if isinstance(func, ast.Name):
            return func.id
        if isinstance(func, ast.Attribute):
            return func.attr
    return None


def _local_names(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """Names local to a function (its parameters and what it binds), less those it declares global."""
    arguments = function.args
    names = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
    names.update(a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None)
    declared: set[str] = set()
    body = function.body if isinstance(function.body, list) else [function.body]
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                declared.update(node.names)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
    return names - declared


def _mutated(tree: ast.Module, candidates: set[str]) -> set[str]:
    """The module-level names among ``candidates`` that the module's functions change: item or attribute
    assignment or deletion, an in-place method (``MUTATORS``), an augmented assignment, or rebinding under
    ``global``. The module's own top-level code (run once, at import) only builds its tables."""
    found: set[str] = set()

    def base(node: ast.expr, shadowed: set[str]) -> str | None:
        while isinstance(node, (ast.Subscript, ast.Attribute)):
            node = node.value
        if isinstance(node, ast.Name) and node.id in candidates and node.id not in shadowed:
            return node.id
        return None

    def visit(node: ast.AST, shadowed: set[str], inside: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            shadowed, inside = shadowed | _local_names(node), True
            if not isinstance(node, ast.Lambda):
                for statement in ast.walk(node):
                    if isinstance(statement, ast.Global):
                        found.update(n for n in statement.names if n in candidates)
        if not inside:  # the module's own body runs once, at import: it builds its tables
            for child in ast.iter_child_nodes(node):
                visit(child, shadowed, inside)
            return
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in _unpacked(target)]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            if isinstance(target, (ast.Subscript, ast.Attribute)) or isinstance(node, (ast.AugAssign, ast.Delete)):
                name = base(target, shadowed)
                if name is not None:
                    found.add(name)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            name = base(node.func.value, shadowed)
            if name is not None:
                found.add(name)
        for child in ast.iter_child_nodes(node):
            visit(child, shadowed, inside)

    visit(tree, set(), False)
    return found


def _state(module: str, tree: ast.Module) -> set[str]:
    """Module-level mutable state: a name bound at module level that the module changes (``_mutated``), or one
    made by a constructor of state (``STATEFUL``: a thread-local, a weak set or mapping). Constant tables (built
    at import, never changed afterwards) and other names for ``STATE``'s parts are not state."""
    bound = {name: value for name, value in _module_names(tree).items() if not _of_state(value)}
    stateful = {name for name, value in bound.items() if _called_name(value) in STATEFUL}
    return stateful | _mutated(tree, set(bound))


def _of_state(value: ast.expr | None) -> bool:
    """Whether a module-level name is another name for part of ``fsguard.state``'s ``STATE`` (``MEMORY =
    state.STATE.memory``): the state is state.py's, the name only saves an attribute lookup. So is a cache its
    owner registered there (``FOUND = STATE.caches.register(_Found())``): typed by its owner, emptied by state."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "register":
        registry = value.func.value
        if isinstance(registry, ast.Attribute) and registry.attr == "caches":
            value = registry
    while isinstance(value, ast.Attribute):
        value = value.value
        if (isinstance(value, ast.Name) and value.id == "STATE") or (
            isinstance(value, ast.Attribute) and value.attr == "STATE"
        ):
            return True
    return False


def _offenders(package: Path = PACKAGE) -> set[str]:
    found: set[str] = set()
    for module, tree in _trees(package).items():
        for name, function in _functions(tree, module):
            if function.end_lineno is not None and function.end_lineno - function.lineno + 1 > MAX_FUNCTION_LINES:
                found.add(f"function {name}")
        for name, cls in _classes(tree, module):
            if len(_attributes(cls)) > MAX_CLASS_ATTRIBUTES:
                found.add(f"class {name}")
        if module != STATE_MODULE:
            found.update(f"state {module}.{name}" for name in _state(module, tree))
    return found


def test_house_rules_hold_but_for_the_one_exception() -> None:
    """No function over 60 lines, no class over 12 attributes, module-level mutable state only in
    ``fsguard/state.py``: what breaks a rule is exactly ``EXCEPTIONS`` (each with its reason), nothing else."""
    found = _offenders()
    assert found - EXCEPTIONS.keys() == set(), f"new offenders: {sorted(found - EXCEPTIONS.keys())}"
    assert EXCEPTIONS.keys() - found == set(), f"no longer needed: {sorted(EXCEPTIONS.keys() - found)}"


# --- the positive control: a synthetic package breaking each rule once, which each check must flag ---------------

BAD = {
    "_values.py": "from fsguard.cli import main\n",  # a leaf importing the top layer: an arrow upwards
    "cli/a.py": "from fsguard.cli import b\n",  # inside one package, arrows go anywhere, but not in a circle
    "cli/b.py": "from fsguard.cli import a\n",
    "calls.py": "def long():\n" + "    x = 1\n" * MAX_FUNCTION_LINES + "    return x\n",
    "config.py": "class Wide:\n    def __init__(self):\n"
    + "".join(f"        self.a{i} = {i}\n" for i in range(MAX_CLASS_ATTRIBUTES + 1)),
    "memory.py": "SEEN = []\n\n\ndef note(x):\n    SEEN.append(x)\n",
    "records.py": "import threading\n\nLOCAL = threading.local()\n",
    "state.py": "KEPT = []\n\n\ndef keep(x):\n    KEPT.append(x)\n",  # the one module allowed state
    "cli/__init__.py": "def main():\n    pass\n",
}


def test_each_rule_flags_a_module_that_breaks_it(tmp_path: Path) -> None:
    package = tmp_path / "fsguard"
    for name, text in BAD.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    assert _upward(_graph(package)) == ["fsguard._values -> fsguard.cli"]
    try:
        _check_no_circle(_graph(package))
    except AssertionError as circle:
        assert "fsguard.cli.a -> fsguard.cli.b -> fsguard.cli.a" in str(circle), circle
    else:
        raise AssertionError("the circle of fsguard.cli.a and fsguard.cli.b was not found")
    assert _offenders(package) == {
        "function fsguard.calls.long",
        "class fsguard.config.Wide",
        "state fsguard.memory.SEEN",
        "state fsguard.records.LOCAL",
    }


# --- the fourth floor (issue 49): one table of operations, rules imported visibly, rooms of a readable size -------

# ``"rename"`` (the string, as a rule or a table would key on it) is spelled in at most this many modules of
# ``fsguard/`` besides its rule's own module and ``audit/`` (which reads logs of jobs run without fsguard): the
# facts of an operation live in one row of ``fsguard.operations``, and every other registry is a view of it.
SPELLED = "rename"
MAX_SPELLING_MODULES = 3
SPELLING_ALLOWED = ("fsguard.guards.rename", "fsguard.audit")


def _spelling(package: Path = PACKAGE, word: str = SPELLED) -> set[str]:
    """The modules (but the allowed ones) in which ``word`` appears as a whole string constant."""
    found = set()
    for module, tree in _trees(package).items():
        if any(module == allowed or module.startswith(allowed + ".") for allowed in SPELLING_ALLOWED):
            continue
        if any(isinstance(node, ast.Constant) and node.value == word for node in ast.walk(tree)):
            found.add(module)
    return found


def test_an_operation_is_spelled_in_few_modules() -> None:
    spelled = _spelling()
    assert len(spelled) <= MAX_SPELLING_MODULES, f'"{SPELLED}" is spelled in {sorted(spelled)}: use fsguard.operations'


# Imports computed from a value at run time hide an edge of the import graph from readers and from this test
# (a rule loaded as ``__import__(self.module)``). What may still compute one, and why:
COMPUTED_IMPORTS: dict[str, str] = {
    "fsguard.patching.original": (
        "the module of a guarded function, from fsguard.operations' table (os or shutil): importing it is what "
        "runs a wrap deferred to the module's first import (fsguard._later), not an import of fsguard's own"
    ),
    "fsguard._wrapt._extension_alone": (
        "wrapt's C extension beneath wrapt's package, deliberately not run (issue 37): a constant name, imported "
        "by the import system's own function so that the package's __init__ stays unexecuted"
    ),
    "fsguard.cli.__main__.build_parser": (
        "the sub-command's module (fsguard.cli.<name> of COMMANDS), imported only when that sub-command runs"
    ),
}


def _computed_imports(package: Path = PACKAGE) -> set[str]:
    """Functions (qualified names) that call ``__import__`` or ``importlib.import_module``; module level too."""
    found = set()
    for module, tree in _trees(package).items():
        owners = [(name, function) for name, function in _functions(tree, module)]
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name not in ("__import__", "import_module"):
                continue
            inside = [q for q, f in owners if f.lineno <= node.lineno <= (f.end_lineno or f.lineno)]
            found.add(max(inside, key=len) if inside else module)  # the innermost function, else the module
    return found


def test_no_rule_is_imported_by_a_computed_name() -> None:
    found = _computed_imports()
    assert found - COMPUTED_IMPORTS.keys() == set(), f"computed imports: {sorted(found - COMPUTED_IMPORTS.keys())}"
    assert COMPUTED_IMPORTS.keys() - found == set(), f"no longer needed: {sorted(COMPUTED_IMPORTS.keys() - found)}"


MAX_MODULE_LINES = 600
# Modules exempt from the limit: none (rmwalk and audit.scan were split, issue 49). A module listed here is not
# checked; an entry needs its reason beside it.
SPLIT_PENDING: frozenset[str] = frozenset()


def _long_modules(package: Path = PACKAGE) -> set[str]:
    return {
        module
        for module, path in _modules(package).items()
        if len(path.read_text().splitlines()) > MAX_MODULE_LINES and module not in SPLIT_PENDING
    }


def test_no_module_is_over_600_lines() -> None:
    assert _long_modules() == set(), f"over {MAX_MODULE_LINES} lines: split them along their seams"


def _untyped_state(package: Path = PACKAGE) -> list[int]:
    """The lines of ``fsguard/state.py`` that name ``typing.Any``: its caches are typed by the modules that own
    them (``state.Caches.register``), and what state holds itself has a type state can name."""
    lines = []
    for node in ast.walk(_trees(package)[STATE_MODULE]):
        if isinstance(node, ast.ImportFrom):
            names = [alias.name for alias in node.names]
        else:
            names = [getattr(node, "id", None) if isinstance(node, ast.Name) else getattr(node, "attr", None)]
        if "Any" in names:
            lines.append(node.lineno)
    return sorted(lines)


def test_state_holds_nothing_typed_any() -> None:
    assert _untyped_state() == [], "fsguard/state.py names Any: let the cache's owner type it (STATE.caches.register)"


def test_the_fourth_floor_checks_flag_a_module_that_breaks_them(tmp_path: Path) -> None:
    """The positive control of the checks above: a synthetic package breaking each once."""
    package = tmp_path / "fsguard"
    bad = {
        **{f"m{i}.py": f'OP = "{SPELLED}"\n' for i in range(MAX_SPELLING_MODULES + 1)},
        "guards/rename.py": f'OP = "{SPELLED}"\n',  # allowed: the rule's own module
        "audit/scan.py": f'OP = "{SPELLED}"\n',  # allowed: audit
        "docs.py": f'"""A {SPELLED} in prose is no key."""\n',
        "failure.py": "def load(name):\n    return __import__(name)\n",
        "cli/__main__.py": "import importlib\n\n\ndef build_parser(name):\n    return importlib.import_module(name)\n",
        "big.py": "x = 1\n" * (MAX_MODULE_LINES + 1),
        "state.py": "from typing import Any\n\n\nclass Caches:\n    def __init__(self):\n        self.x: Any = None\n",
    }
    for name, text in bad.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    assert _spelling(package) == {f"fsguard.m{i}" for i in range(MAX_SPELLING_MODULES + 1)}
    assert _computed_imports(package) == {"fsguard.failure.load", "fsguard.cli.__main__.build_parser"}
    assert _long_modules(package) == {"fsguard.big"}
    assert _untyped_state(package) == [1, 6]


def test_every_operation_names_a_rule_module_imported_where_readers_see_it() -> None:
    """A new operation is a row of ``fsguard.operations`` and a rule module: this fails until ``guards.rule_modules``
    imports the module its row names (by a plain import, so the edge is in the import graph above)."""
    from fsguard import guards, operations

    modules = guards.rule_modules()
    named = {op.rule for op in operations.OPERATIONS.values() if op.rule is not None}
    assert named <= modules.keys(), sorted(named - modules.keys())
    files = {path.stem for path in (PACKAGE / "guards").glob("*.py")} - {"__init__", "_identical"}  # _identical: shared
    assert files == modules.keys(), "a rule module that guards.rule_modules does not import, or one that is gone"
