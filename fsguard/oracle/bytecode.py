"""3.11+: the layers of handling around an instruction, from the code object's exception table.

The table's format: CPython's ``Objects/exception_handling_notes.txt``. Each handler is read along its normal
flow (no exception edges): the paths that leave it normally swallow the error, the others re-raise it, raise
another class or exit. Anything of another shape is ``Unknown``: the program decides.
"""

from __future__ import annotations

import dis
from typing import Any

from .names import SKIP, attributes, loads
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

_UNCONDITIONAL = frozenset(
    {"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP_ABSOLUTE", "JUMP", "JUMP_NO_INTERRUPT"}
)
_CLEANUP_OPS = frozenset(
    {"SWAP", "POP_TOP", "CALL_INTRINSIC_1", "COPY", "NOP", "LOAD_CONST", "LOAD_COMMON_CONSTANT"}
    | {f"{verb}_{scope}" for verb in ("STORE", "DELETE") for scope in ("FAST", "NAME", "GLOBAL", "DEREF")}
    | {"STORE_FAST_MAYBE_NULL"}
)  # a handler's exit, ``as e``'s deletion (in a function, a module or a closure), a comprehension's variable
_EXITS = {("sys", "exit"), ("os", "_exit"), ("os", "abort")}
_STORES = ("STORE_FAST", "STORE_DEREF", "STORE_NAME", "STORE_GLOBAL", "DELETE_FAST", "DELETE_DEREF", "DELETE_NAME")
# How a ``with`` statement enters its manager: up to 3.13 ``BEFORE_WITH``; from 3.14 its two special methods.
_ENTRY_314 = ("COPY", "LOAD_SPECIAL", "SWAP", "SWAP", "LOAD_SPECIAL", "CALL")


def exception_table(code: Any) -> list[tuple[int, int, int]]:
    """(start, end, target) byte offsets, end exclusive."""
    data = code.co_exceptiontable
    entries = []
    i = 0

    def varint() -> int:
        nonlocal i
        b: int = data[i]
        i += 1
        value = b & 63
        while b & 64:
            b = data[i]
            i += 1
            value = (value << 6) | (b & 63)
        return value

    while i < len(data):
        start = varint() * 2
        length = varint() * 2
        target = varint() * 2
        varint()  # depth and lasti
        entries.append((start, start + length, target))
    return entries


class Code:
    """One code object's instructions, exception table and jump targets."""

    def __init__(self, code: Any) -> None:
        self.ins = [_kw_names(i, code) for i in dis.get_instructions(code) if i.opname != "CACHE"]
        self.index = {ins.offset: n for n, ins in enumerate(self.ins)}
        self.table = exception_table(code)
        self.targets = {i.argval for i in self.ins if "JUMP" in i.opname or i.opname in ("FOR_ITER", "SEND")}

    def handler(self, at: int | None) -> int | None:
        """The handler offset for an error at offset ``at``."""
        if at is None:
            return None
        for start, end, target in self.table:
            if start <= at < end:
                return target
        return None

    def reraise_after(self, n: int, limit: int = 1_000_000) -> int | None:
        """Offset of the first RERAISE from instruction ``n`` leaving to ``n``'s handler."""
        leaves_to = self.handler(self.ins[n].offset)
        for ins in self.ins[n : n + limit]:
            if ins.opname == "RERAISE" and self.handler(ins.offset) == leaves_to:
                offset: int = ins.offset
                return offset
        return None

    def cleanup(self, n: int) -> int | None:
        """The RERAISE ending a cleanup block at instruction ``n``; None: not a cleanup.

        Cleanups: a handler's exit, ``as e``'s deletion, an inlined comprehension's variable, a generator's
        StopIteration check."""
        first = self.ins[n]
        if first.opname == "COPY" and n + 1 < len(self.ins) and self.ins[n + 1].opname == "POP_EXCEPT":
            return self.reraise_after(n, 3)
        for ins in self.ins[n : n + 8]:
            if ins.opname == "RERAISE":
                offset: int = ins.offset
                return offset
            if ins.opname not in _CLEANUP_OPS:
                return None
        return None

    def real_handler(self, at: int | None) -> int | None:
        """The first handler from offset ``at`` that is not a cleanup; -1: unreadable."""
        for _ in range(32):
            target = self.handler(at)
            if target is None:
                return None
            n = self.index.get(target)
            if n is None:
                return -1
            if self.ins[n].opname == "PUSH_EXC_INFO":
                return target
            at = self.cleanup(n)
            if at is None:
                return -1
        return -1


def _kw_names(ins: Any, code: Any) -> Any:
    """3.11's ``dis`` leaves ``KW_NAMES``' names unknown: they are the constant at its argument."""
    if ins.opname == "KW_NAMES" and not isinstance(ins.argval, tuple) and isinstance(ins.arg, int):
        return ins._replace(argval=code.co_consts[ins.arg])
    return ins


def layers(code: Any, offset: int) -> list[Layer]:
    """The layers of handling an error at ``offset`` meets in its frame, innermost first."""
    c = Code(code)
    found: list[Layer] = []
    at: int | None = offset
    for _ in range(64):  # nesting depth bound
        target = c.handler(at)
        if target is None:
            return found
        n = c.index.get(target)
        if n is None or n + 1 >= len(c.ins):
            return [*found, Unknown("a handler outside the code")]
        first, second = c.ins[n], c.ins[n + 1]
        if first.opname != "PUSH_EXC_INFO":
            at = c.cleanup(n)
            if at is None:
                return [*found, Unknown(f"a handler starting with {first.opname}")]
        elif second.opname == "WITH_EXCEPT_START":
            found.append(_with(c, target))
            at = c.reraise_after(n + 1, 8)
        elif any(ins.opname == "CHECK_EG_MATCH" for ins in c.ins[n : n + 12]):
            return [*found, Unknown("except* (an exception group's handler)")]
        else:
            layer, at = _catch(c, n)
            if layer is None:
                return [*found, Unknown("an except clause fsguard cannot read")]
            found.append(layer)
    return [*found, Unknown("too deep")]


def _catch(c: Code, n: int) -> tuple[Catch | None, int | None]:
    """The ``try`` whose handler starts at instruction ``n``, and where its error goes on.

    That is the handler's own start (PUSH_EXC_INFO), whose cleanup leads outwards as its bodies' raises do; a
    block nested in a bare ``except``'s body is not on that way."""
    reference = c.real_handler(c.ins[n].offset)
    if c.ins[n + 1].opname == "POP_TOP":  # a bare except, or a finally that drops the error (return, break)
        return Catch((Clause(None, "except", fate_of(c, n + 2, reference)),)), c.ins[n].offset
    clauses, _, bare = _clauses(c, n + 1)
    if clauses is None:  # no clause: a finally block, its body read to its end
        return Catch((Clause(None, "finally", fate_of(c, n + 1, reference)),)), c.ins[n].offset
    if clauses == "unknown":
        return None, None
    found = [Clause(run, label, fate_of(c, body, reference)) for run, label, body in clauses]
    if bare is not None:
        found.append(Clause(None, "except", fate_of(c, bare, reference)))
    return Catch(tuple(found)), c.ins[n].offset


def fate_of(c: Code, body: int, reference: int | None) -> Fate:
    """What a handler whose body starts at instruction ``body`` does, read along its normal flow. A raise in a
    block nested in the handler (it leaves to another handler than ``reference``) is unreadable."""
    while body < len(c.ins) and c.ins[body].opname == "NOT_TAKEN":
        body += 1
    todo: list[tuple[int, Any]] = [(body, None)]
    seen: set[tuple[int, Any]] = set()
    raised: list[Raised] = []
    named = c.ins[body].argval if body < len(c.ins) and c.ins[body].opname.startswith("STORE_") else None
    while todo:
        n, delegate = todo.pop()
        if n >= len(c.ins) or (n, delegate) in seen:
            continue
        if len(seen) > 2000:
            return Fate(False, (Unreadable("a handler too long to read"),))
        seen.add((n, delegate))
        ins = c.ins[n]
        op = ins.opname
        if op in ("RERAISE", "RAISE_VARARGS"):
            if c.real_handler(ins.offset) != reference:
                raised.append(Unreadable("a raise inside a block nested in a handler"))
            elif op == "RERAISE" or ins.arg == 0:
                raised.append(Same())
            else:
                raised.append(_raised(c.ins, n, named))
            continue
        if op in ("RETURN_VALUE", "RETURN_CONST", "POP_EXCEPT"):
            if delegate is None:
                return SWALLOWS
            run = [i for i in c.ins[delegate[0] : delegate[1]] if i.opname not in SKIP]
            raised.append(Delegates(run, label(run)))
            continue
        if op in ("YIELD_VALUE", "SEND", "RETURN_GENERATOR", "GET_AWAITABLE"):
            return Fate(False, (Unreadable("a yield or await inside a handler"),))
        if op in ("LOAD_GLOBAL", "LOAD_NAME"):
            exiting = _exit_call(c.ins, n)
            if exiting is not None:
                raised.append(Exits(exiting, label(exiting)))
                continue
        if op.startswith("CALL") and named is not None:
            delegate = _delegation(c.ins, n, named) or delegate
        if "JUMP" in op or op == "FOR_ITER":
            target = c.index.get(ins.argval) if isinstance(ins.argval, int) else None
            if target is not None:
                todo.append((target, delegate))
            if op in _UNCONDITIONAL:
                continue
        todo.append((n + 1, delegate))
    return Fate(False, _unique(raised)) if raised else SWALLOWS


def _exit_call(instructions: list[Any], n: int) -> list[Any] | None:
    """The loads of ``sys.exit``, ``os._exit``, ``os.abort``, ``exit`` or ``quit`` at instruction ``n``."""
    ins = instructions[n]
    after = instructions[n + 1] if n + 1 < len(instructions) else None
    if after is not None and after.opname in ("LOAD_ATTR", "LOAD_METHOD") and (ins.argval, after.argval) in _EXITS:
        return [ins, after]
    return [ins] if ins.argval in ("exit", "quit") else None


def _unique(raised: list[Raised]) -> tuple[Raised, ...]:
    unique: list[Raised] = []
    for item in raised:
        if not any(type(item) is type(u) and repr(item) == repr(u) for u in unique):
            unique.append(item)
    return tuple(unique)


def _delegation(instructions: list[Any], n: int, named: Any) -> tuple[int, int] | None:
    """The callee a handler hands its own error to, as an instruction range. For a call of one argument at instruction
    ``n`` passing the handler's own error (``f(e)``, ``self.handle(e)``). Returns the instruction range of its callee's
    attribute chain; else None."""
    if instructions[n].arg != 1:
        return None
    m = n - 1
    while m >= 0 and instructions[m].opname in SKIP:
        m -= 1
    if m < 1 or not instructions[m].opname.startswith("LOAD_FAST") or instructions[m].argval != named:
        return None
    k = m - 1
    while k >= 0 and instructions[k].opname in SKIP:
        k -= 1
    end = k + 1
    while k >= 0 and instructions[k].opname in ("LOAD_ATTR", "LOAD_METHOD"):
        k -= 1
    if k < 0 or not loads(instructions[k].opname) or isinstance(instructions[k].argval, tuple):
        return None
    return k, end


def _raised(instructions: list[Any], n: int, named: Any) -> Raised:
    """What ``raise X`` / ``raise X from Y`` at instruction ``n`` raises."""
    end = n
    if instructions[n].arg == 2:  # ``from Y``: the cause's expression is the last operand
        start = operand(instructions, n)
        if start is None:
            return Unreadable("a raise statement fsguard cannot read")
        end = start
    start = operand(instructions, end)
    if start is None:
        return Unreadable("a raise statement fsguard cannot read")
    run = [ins for ins in instructions[start:end] if ins.opname not in SKIP]
    head = attributes(run, 0)
    if head == 0:
        return Unreadable("a raise statement fsguard cannot read")
    if head == len(run) == 1 and named is not None and run[0].argval == named:
        return Same()
    if head == len(run) or (run[-1].opname.startswith("CALL") and run[-1].opname != "CALL_FUNCTION_EX"):
        return NewClass(run[:head], label(run[:head]))
    return Unreadable("a raise statement fsguard cannot read")


def operand(instructions: list[Any], end: int) -> int | None:
    """The first instruction of the expression whose value instruction ``end`` takes.

    Straight-line code only: None where a jump or anything unusual is in the way."""
    total = 0
    for i in range(end - 1, max(end - 64, -1), -1):
        ins = instructions[i]
        if "JUMP" in ins.opname or ins.opname.startswith(("RETURN", "RAISE", "RERAISE", "POP_EXCEPT", "STORE")):
            return None
        try:
            total += dis.stack_effect(ins.opcode, ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None, jump=False)
        except ValueError:
            return None
        if total >= 1:  # a load that also pushes a NULL (a call's callable) may step from 0 to 2
            return i
    return None


def _clauses(c: Code, n: int) -> tuple[Any, int | None, int | None]:
    """The ``except`` clauses starting at instruction ``n``. ([(instructions, label, body index)], offset of the RERAISE
    after the last clause, the body of a bare ``except`` or None). (None, None, None) for no clause (a ``finally``).
    ("unknown", None, None) for clauses fsguard cannot read."""
    found: list[tuple[list[Any], str, int]] = []
    for _ in range(256):
        run: list[Any] = []
        m = n
        while m < len(c.ins) and c.ins[m].opname != "CHECK_EXC_MATCH" and len(run) < 40:
            op = c.ins[m].opname
            if op == "CHECK_EG_MATCH" or op.startswith(("CALL", "STORE", "RERAISE", "RETURN", "RAISE")):
                break
            if "JUMP" in op or op in ("POP_TOP", "POP_EXCEPT"):
                break
            run.append(c.ins[m])
            m += 1
        if m >= len(c.ins) or c.ins[m].opname != "CHECK_EXC_MATCH" or not run:
            return (None, None, None) if not found else ("unknown", None, None)
        found.append((run, "except " + label(run), m + 2))
        jump = c.ins[m + 1] if m + 1 < len(c.ins) else None
        if jump is None or "IF_FALSE" not in jump.opname:
            return "unknown", None, None
        n = c.index.get(jump.argval, -1)
        if n < 0:
            return "unknown", None, None
        nxt = c.ins[n]
        if nxt.opname == "RERAISE":
            return found, nxt.offset, None
        if nxt.opname == "POP_TOP":
            return found, None, n + 1
    return "unknown", None, None


def label(run: list[Any]) -> str:
    """Source-like text of a short run of loads."""
    parts: list[str] = []
    for ins in run:
        if ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and parts:
            parts[-1] += "." + str(ins.argval)
        elif ins.opname == "BUILD_TUPLE":
            k = ins.arg or 0
            items = parts[len(parts) - k :] if k else []
            del parts[len(parts) - k :]
            parts.append("(" + ", ".join(items) + ")")
        elif isinstance(ins.argval, tuple) and ins.opname.startswith("LOAD_FAST"):
            parts.extend(ins.argval)
        elif ins.opname == "LOAD_CONST":
            parts.append(repr(ins.argval))
        elif ins.opname.startswith("LOAD"):
            parts.append(str(ins.argval))
    return " ".join(parts)


def _with(c: Code, target: int) -> With:
    """The ``with`` item whose ``__exit__`` is called at handler ``target``. Its context expression, unless that is
    conditional (``a if c else b``) or a name it loads is rebound inside the block."""
    entries = [(start, end) for start, end, t in c.table if t == target]
    n = c.index.get(min(entries)[0]) if entries else None
    consumer = _entry(c.ins, n)
    start = operand(c.ins, consumer) if consumer is not None else None
    if consumer is None or start is None:
        return With(None, "with")
    run = c.ins[start:consumer]
    plain = [ins for ins in run if ins.opname not in SKIP]
    text = _text(plain)
    if any(ins.offset in c.targets for ins in c.ins[start + 1 : consumer + 1]):
        return With(None, text, "a conditional or computed context manager")
    low, high = min(s for s, _ in entries), max(e for _, e in entries)
    names = {ins.argval for ins in plain if loads(ins.opname)}
    if any(low <= i.offset < high and i.opname.startswith(_STORES) and i.argval in names for i in c.ins):
        return With(None, text, "a context manager whose name is rebound inside its block")
    return With(run, text)


def _text(plain: list[Any]) -> str:
    head = attributes(plain, 0)
    if head == len(plain):
        return f"with {label(plain)}"
    words, m = [], head
    while m < len(plain) - 1:
        end = attributes(plain, m)
        if end == m:
            return f"with {label(plain[:head])}(...)"
        words.append(label(plain[m:end]))
        m = end
    return f"with {label(plain[:head])}({', '.join(words)})"


def _entry(instructions: list[Any], n: int | None) -> int | None:
    """Where a ``with`` block protected from instruction ``n`` on takes its manager off the stack."""
    if n is None or n < 2:
        return None
    if instructions[n - 1].opname == "BEFORE_WITH":
        return n - 1
    first = n - len(_ENTRY_314)
    if first > 0 and tuple(ins.opname for ins in instructions[first:n]) == _ENTRY_314:
        return first
    return None


def yields(code: Any) -> list[int] | None:
    """The offsets of a generator's ``yield``s; None where it delegates (``yield from``, ``await``)."""
    c = Code(code)
    if any(ins.opname in ("SEND", "GET_YIELD_FROM_ITER", "GET_AWAITABLE") for ins in c.ins):
        return None
    return [ins.offset for ins in c.ins if ins.opname == "YIELD_VALUE"]
