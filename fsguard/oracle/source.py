"""3.10: the layers of handling around a line, from the source's ``ast``.

Used where there is no exception table. A line is read only where that is unambiguous (a ``with`` statement
and its body on one line, a line outside the frame's own function: ``Unknown``).
"""

from __future__ import annotations

import ast
from typing import Any

from ..state import STATE
from .values import (
    SWALLOWS,
    Catch,
    Clause,
    Delegates,
    Exits,
    Fate,
    Layer,
    NewClass,
    Raised,
    Same,
    Unknown,
    Unreadable,
    With,
)

_LEAVES = (ast.Return, ast.Break, ast.Continue)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_EXIT_NAMES = {("sys", "exit"), ("os", "_exit"), ("os", "abort")}
# file -> (its source, its ast), 3.10 only: found once per install (a cache of state.STATE.caches)
SOURCE_TREES: dict[str, tuple[str, ast.Module]] = STATE.caches.register({})


def tree(code: Any, module_globals: Any) -> Any:
    """The parsed source of ``code``'s file, or why none (str). Cached per file while its text is the same."""
    import linecache

    lines = linecache.getlines(code.co_filename, module_globals)
    if not lines:
        return "no source"
    text = "".join(lines)
    trees = SOURCE_TREES
    found = trees.get(code.co_filename)
    if found is None or found[0] != text:
        try:
            found = (text, ast.parse(text))
        except (SyntaxError, ValueError):
            return "source does not parse"
        if len(trees) > 256:
            trees.clear()
        trees[code.co_filename] = found
    return found[1]


def function(code: Any, line: int, module_globals: Any) -> tuple[Any, list[Any]] | str:
    """The node of ``code`` and the blocks around ``line`` in it, outermost first."""
    node: Any = tree(code, module_globals)
    if isinstance(node, str):
        return node
    chain: list[Any] = []
    scope: Any = None
    while True:
        inner = None
        for child in ast.iter_child_nodes(node):
            start, end = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            inside = start is not None and end is not None and start <= line <= end
            if inside and isinstance(child, (ast.stmt, ast.excepthandler)):
                inner = child
                break
        if inner is None:
            break
        if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            chain, scope = [], inner
        elif isinstance(inner, (ast.Try, ast.With, ast.AsyncWith)) or type(inner).__name__ == "TryStar":
            chain.append(inner)
        node = inner
    if code.co_name == "<module>":
        if scope is not None:
            return "line not in the module's own code"
    elif scope is None or scope.name != code.co_name:
        return "line not in the function's own code"
    return scope, chain


def layers(code: Any, line: int, module_globals: Any) -> list[Layer]:
    """The layers of handling an error at ``line`` meets in ``code``'s frame, innermost first."""
    found = function(code, line, module_globals)
    if isinstance(found, str):
        return [Unknown(found)]
    _, chain = found
    out: list[Layer] = []
    for block in reversed(chain):
        if type(block).__name__ == "TryStar":
            return [*out, Unknown("except* (an exception group's handler)")]
        if isinstance(block, ast.Try):
            where = _part(block, line)
            if where == "body":
                out += _excepts(block)
            if where in ("body", "handlers", "orelse") and block.finalbody:
                out.append(Catch((Clause(None, "finally", _finally(block.finalbody)),)))
            continue
        if not _within(block.body, line):
            continue  # the with statement's header
        if line == block.lineno or line <= max(i.context_expr.end_lineno or 0 for i in block.items):
            return [*out, Unknown("a with statement and its body on one line")]
        if isinstance(block, ast.AsyncWith):
            return [*out, Unknown("an async with block")]
        stored = {n.id for n in _nodes(block.body) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        for item in reversed(block.items):
            why = _computed(item.context_expr)
            if not why and stored & {n.id for n in ast.walk(item.context_expr) if isinstance(n, ast.Name)}:
                why = "a context manager whose name is rebound inside its block"
            out.append(With(item.context_expr, "with " + ast.unparse(item.context_expr), why))
    return out


def _within(body: list[Any], line: int) -> bool:
    return bool(body) and body[0].lineno <= line <= (body[-1].end_lineno or 0)


def _part(block: Any, line: int) -> str:
    if _within(block.body, line):
        return "body"
    if any(h.lineno <= line <= (h.end_lineno or 0) for h in block.handlers):
        return "handlers"
    if _within(block.orelse, line):
        return "orelse"
    return "finalbody"


def _computed(node: Any) -> str:
    """Why a context expression cannot be read once (conditional, computed); "" where it can."""
    if isinstance(node, (ast.IfExp, ast.BoolOp)) or any(isinstance(n, (ast.IfExp, ast.BoolOp)) for n in ast.walk(node)):
        return "a conditional or computed context manager"
    return ""


def _excepts(block: Any) -> list[Layer]:
    clauses: list[Clause] = []
    for handler in block.handlers:
        fate = _fate(handler)
        if handler.type is None:
            clauses.append(Clause(None, "except", fate))
            break
        clauses.append(Clause(handler.type, "except " + ast.unparse(handler.type), fate))
    return [Catch(tuple(clauses))] if clauses else []


def _nodes(body: list[Any]) -> list[Any]:
    """The nodes of ``body``, not those of functions or classes defined in it."""
    found: list[Any] = []
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, _SCOPES):
            continue
        found.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return found


def _finally(body: list[Any]) -> Fate:
    """Whether a ``finally`` body passes the error on. It does unless it may return, break, continue, raise or yield."""
    nodes = _nodes(body)
    if any(isinstance(n, _LEAVES) for n in nodes):
        return SWALLOWS
    if any(isinstance(n, (ast.Raise, ast.Yield, ast.YieldFrom, ast.Await, ast.Try)) for n in nodes):
        return Fate(False, (Unreadable("a finally block that raises or handles"),))
    return Fate(False, (Same(),))


def _fate(clause: Any) -> Fate:
    """What a handler does with the error it caught, from its source.

    It raises on every path when its last statement raises (or exits) and nothing in it returns, breaks,
    continues, yields or nests a block around a raise."""
    body = clause.body
    nodes = _nodes(body)
    if any(isinstance(node, _LEAVES) for node in nodes):
        return SWALLOWS
    if any(isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)) for node in nodes):
        return Fate(False, (Unreadable("a yield or await inside a handler"),))
    nested = _nodes([n for n in nodes if isinstance(n, (ast.Try, ast.With))])
    raised: list[Raised] = []
    last = body[-1] if body else None
    call = last.value if isinstance(last, ast.Expr) else None
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, (ast.Name, ast.Attribute))
        and [type(a) for a in call.args] == [ast.Name]
        and call.args[0].id == clause.name  # type: ignore[attr-defined]
        and not call.keywords
    ):
        raised.append(Delegates(call.func, ast.unparse(call.func)))  # ``self._handle_exception(e)``
    elif not (isinstance(last, ast.Raise) or (last is not None and _exit(last) is not None)):
        return SWALLOWS
    for node in nodes:
        ending = _exit(node) if isinstance(node, ast.Expr) else None
        if ending is not None:
            raised.append(ending)
        elif isinstance(node, ast.Raise):
            if any(node is n for n in nested):
                raised.append(Unreadable("a raise inside a block nested in a handler"))
                continue
            exc = node.exc
            if exc is None or (isinstance(exc, ast.Name) and exc.id == clause.name):
                raised.append(Same())
                continue
            target = exc.func if isinstance(exc, ast.Call) else exc
            if isinstance(target, (ast.Name, ast.Attribute)):
                raised.append(NewClass(target, ast.unparse(target)))
            else:
                raised.append(Unreadable("a raise statement fsguard cannot read"))
    return Fate(False, tuple(raised))


def _exit(statement: Any) -> Exits | None:
    call = statement.value if isinstance(statement, ast.Expr) else None
    if not isinstance(call, ast.Call):
        return None
    func = call.func
    if isinstance(func, ast.Name) and func.id in ("exit", "quit"):
        return Exits(func, func.id)
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and (func.value.id, func.attr) in _EXIT_NAMES
    ):
        return Exits(func, ast.unparse(func))
    return None


def yields(code: Any, module_globals: Any) -> list[int] | None:
    """The lines of a generator function's ``yield``s; None where it delegates or cannot be read."""
    node: Any = tree(code, module_globals)
    if isinstance(node, str):
        return None
    defs = [
        n
        for n in ast.walk(node)
        if isinstance(n, ast.FunctionDef)
        and n.name == code.co_name
        and min([d.lineno for d in n.decorator_list] + [n.lineno]) == code.co_firstlineno
    ]
    if len(defs) != 1:
        return None
    nodes = _nodes(defs[0].body)
    if any(isinstance(n, (ast.YieldFrom, ast.Await)) for n in nodes):
        return None
    return sorted({n.lineno for n in nodes if isinstance(n, ast.Yield)})
