"""Every ``FSGUARD_*`` setting in one place: parse, validate, default, and the problems found.

Bad values never raise: they are reported (one line each, at startup and in ``fsguard status``) and the
default is used instead.
"""

from __future__ import annotations

from ._values import Frozen
from ._warn import OFF
from .operations import OPERATIONS

TYPE_CHECKING = False  # not typing's: only what startup needs is imported (see bench/startup.py)
if TYPE_CHECKING:
    from collections.abc import Mapping

ALL_OPS = tuple(OPERATIONS)  # a view of fsguard.operations' table, in its order
LOCK_BACKENDS = ("auto", "store", "file", "off")

_TRUE = ("1", "true", "on", "yes")
_FALSE = OFF


class Variable(Frozen):
    """One documented environment variable, and the ``Settings`` field it sets. It holds the name, the default as a user
    would write it, and what it means. ``kind`` says how its text is read; ``limit`` is the most seconds a ``seconds``
    variable takes. The one place a setting's default lives: ``load``, ``Settings()``, ``fsguard status`` and the
    documentation's table all read it from here."""

    _fields = ("name", "default", "help", "field", "kind", "limit")
    __slots__ = _fields
    name: str
    default: str
    help: str
    field: str
    kind: str  # mode | ops | seconds | flag | lock | path
    limit: float

    def __init__(self, name: str, default: str, help: str, field: str, kind: str, limit: float = 0.0) -> None:
        super().__init__(name, default, help, field, kind, limit)


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "FSGUARD",
        "0",
        "1/true/on/yes: guard when a distributed launcher is detected; force: always; 0: off",
        "mode",
        "mode",
    ),
    Variable("FSGUARD_OPS", ",".join(ALL_OPS), "comma-separated operations to guard", "ops", "ops"),
    Variable(
        "FSGUARD_SETTLE_S",
        "2.0",
        "longest wait, in seconds, for a shared filesystem to show a peer's change",
        "settle_s",
        "seconds",
        600,
    ),
    Variable(
        "FSGUARD_FRESH_S",
        "5",
        "a path changed up to this many seconds before the job started still counts as made by this job",
        "fresh_s",
        "seconds",
        86400 * 7,
    ),
    Variable(
        "FSGUARD_YIELD_S",
        "0.25",
        "longest wait, in seconds, before removing a tree peers wrote during this job, for a peer renaming it "
        "away (the rename wins); 0: no wait",
        "yield_s",
        "seconds",
        10,
    ),
    Variable(
        "FSGUARD_LOG", "", "directory for one JSON-lines record file per process (unset: none)", "log_dir", "path"
    ),
    Variable(
        "FSGUARD_STDERR",
        "1",
        "1: write each record as one line on stderr through the 'fsguard' logger; 0: don't",
        "stderr",
        "flag",
    ),
    Variable("FSGUARD_SERIALIZE", "0", "1: run guarded operations on one path one rank at a time", "serialize", "flag"),
    Variable(
        "FSGUARD_LOCK",
        "auto",
        "serialization backend: auto, store (torch.distributed store), file (node-local), off",
        "lock",
        "lock",
    ),
    Variable(
        "FSGUARD_LOCK_TIMEOUT",
        "30",
        "longest wait, in seconds, for a serialization lock before going on unserialized",
        "lock_timeout",
        "seconds",
        86400,
    ),
)

_BY_NAME = {v.name: v for v in VARIABLES}


def parse_mode(value: str) -> str | None:
    """``FSGUARD``'s value as off/on/force, or None if it is not understood."""
    v = value.strip().lower()
    if v in _FALSE:
        return "off"
    if v in _TRUE:
        return "on"
    if v == "force":
        return "force"
    return None


def _mode(raw: str | None, problems: list[str]) -> str:
    mode = parse_mode(_BY_NAME["FSGUARD"].default if raw is None else raw)
    if mode is None:
        problems.append(f"FSGUARD={raw!r} is not understood (use 1, 0 or force); staying off")
        return "off"
    return mode


def _ops(raw: str | None, problems: list[str]) -> tuple[str, ...]:
    ops: list[str] = []
    unknown = []
    for name in (part.strip().lower() for part in (_BY_NAME["FSGUARD_OPS"].default if raw is None else raw).split(",")):
        if not name:
            continue
        if name in ALL_OPS:
            ops.append(name)
        else:
            unknown.append(name)
    if unknown:
        problems.append(f"FSGUARD_OPS names unknown operation(s) {', '.join(unknown)}; known: {', '.join(ALL_OPS)}")
    return tuple(op for op in ALL_OPS if op in ops)


def _flag(name: str, raw: str | None, problems: list[str]) -> bool:
    default = _BY_NAME[name].default
    value = (default if raw is None else raw).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    problems.append(f"{name}={raw!r} is not a boolean (use 1 or 0); using {default}")
    return default in _TRUE


def _seconds(name: str, raw: str | None, problems: list[str]) -> float:
    variable = _BY_NAME[name]
    default = float(variable.default)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if value != value or not 0 <= value <= variable.limit:  # NaN or out of range
        problems.append(f"{name}={raw!r} is not a valid number of seconds; using {variable.default}")
        return default
    return value


def _lock(raw: str | None, problems: list[str]) -> str:
    default = _BY_NAME["FSGUARD_LOCK"].default
    lock = (default if raw is None else raw).strip().lower() or default
    if lock not in LOCK_BACKENDS:
        problems.append(f"FSGUARD_LOCK={raw!r} is not one of {', '.join(LOCK_BACKENDS)}; using {default}")
        return default
    return lock


def _path(raw: str | None) -> str | None:
    return (_BY_NAME["FSGUARD_LOG"].default if raw is None else raw).strip() or None


def value_of(variable: Variable, raw: str | None, problems: list[str]) -> object:
    """The value ``raw`` gives ``variable``'s field (None: unset). A bad one adds to ``problems`` and gives the
    default."""
    kind = variable.kind
    if kind == "seconds":
        return _seconds(variable.name, raw, problems)
    if kind == "flag":
        return _flag(variable.name, raw, problems)
    if kind == "mode":
        return _mode(raw, problems)
    if kind == "ops":
        return _ops(raw, problems)
    if kind == "lock":
        return _lock(raw, problems)
    return _path(raw)


class Settings(Frozen):
    """The effective configuration, after defaults and validation. ``problems`` takes no part in ``==``.
    Its defaults are ``VARIABLES``' (read through the same parsing as ``load``)."""

    _fields = (
        "mode",
        "ops",
        "settle_s",
        "fresh_s",
        "log_dir",
        "stderr",
        "serialize",
        "lock",
        "lock_timeout",
        "yield_s",
        "problems",
    )
    __slots__ = _fields
    mode: str  # off | on | force
    ops: tuple[str, ...]
    settle_s: float
    fresh_s: float
    log_dir: str | None
    stderr: bool
    serialize: bool
    lock: str
    lock_timeout: float
    yield_s: float
    problems: tuple[str, ...]

    def __init__(
        self,
        mode: str = _mode(None, []),
        ops: tuple[str, ...] = _ops(None, []),
        settle_s: float = _seconds("FSGUARD_SETTLE_S", None, []),
        fresh_s: float = _seconds("FSGUARD_FRESH_S", None, []),
        log_dir: str | None = _path(None),
        stderr: bool = _flag("FSGUARD_STDERR", None, []),
        serialize: bool = _flag("FSGUARD_SERIALIZE", None, []),
        lock: str = _lock(None, []),
        lock_timeout: float = _seconds("FSGUARD_LOCK_TIMEOUT", None, []),
        yield_s: float = _seconds("FSGUARD_YIELD_S", None, []),
        problems: tuple[str, ...] = (),
    ) -> None:
        super().__init__(
            mode, ops, settle_s, fresh_s, log_dir, stderr, serialize, lock, lock_timeout, yield_s, problems
        )

    def _key(self) -> tuple[object, ...]:
        return self._values()[:-1]  # all but problems


def load(env: Mapping[str, str]) -> Settings:
    """Read the settings from an environment mapping, each variable by its row of ``VARIABLES``. Never raises."""
    problems: list[str] = []
    values = {v.field: value_of(v, env.get(v.name), problems) for v in VARIABLES}
    return Settings(**values, problems=tuple(problems))  # type: ignore[arg-type]


def unknown_variables(env: Mapping[str, str]) -> list[str]:
    """``FSGUARD_*`` names in the environment that fsguard does not know (likely typos)."""
    return sorted(k for k in env if k.startswith("FSGUARD") and k not in _BY_NAME)
