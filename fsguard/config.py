"""Every ``FSGUARD_*`` setting in one place: parse, validate, default, and the problems found.

Bad values never raise: they are reported (one line each, at startup and in ``fsguard status``) and the
default is used instead.
"""

from __future__ import annotations

from ._values import Frozen
from ._warn import OFF

TYPE_CHECKING = False  # not typing's: only what startup needs is imported (see bench/startup.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

ALL_OPS = ("makedirs", "rename", "replace", "rmtree", "remove", "rmdir", "mkdir", "symlink", "link")
LOCK_BACKENDS = ("auto", "store", "file", "off")

_TRUE = ("1", "true", "on", "yes")
_FALSE = OFF


class Variable(Frozen):
    """One documented environment variable."""

    _fields = ("name", "default", "help")
    __slots__ = _fields
    name: str
    default: str
    help: str

    def __init__(self, name: str, default: str, help: str) -> None:
        super().__init__(name, default, help)


VARIABLES: tuple[Variable, ...] = (
    Variable("FSGUARD", "0", "1/true/on/yes: guard when a distributed launcher is detected; force: always; 0: off"),
    Variable("FSGUARD_OPS", ",".join(ALL_OPS), "comma-separated operations to guard"),
    Variable("FSGUARD_SETTLE_S", "2.0", "longest wait, in seconds, for a shared filesystem to show a peer's change"),
    Variable(
        "FSGUARD_FRESH_S",
        "5",
        "a path changed up to this many seconds before the job started still counts as made by this job",
    ),
    Variable(
        "FSGUARD_YIELD_S",
        "0.25",
        "longest wait, in seconds, before removing a tree peers wrote during this job, for a peer renaming it "
        "away (the rename wins); 0: no wait",
    ),
    Variable("FSGUARD_LOG", "", "directory for one JSON-lines record file per process (unset: none)"),
    Variable(
        "FSGUARD_STDERR", "1", "1: write each record as one line on stderr through the 'fsguard' logger; 0: don't"
    ),
    Variable("FSGUARD_SERIALIZE", "0", "1: run guarded operations on one path one rank at a time"),
    Variable(
        "FSGUARD_LOCK", "auto", "serialization backend: auto, store (torch.distributed store), file (node-local), off"
    ),
    Variable(
        "FSGUARD_LOCK_TIMEOUT", "30", "longest wait, in seconds, for a serialization lock before going on unserialized"
    ),
)

_BY_NAME = {v.name: v for v in VARIABLES}


class Settings(Frozen):
    """The effective configuration, after defaults and validation. ``problems`` takes no part in ``==``."""

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
        mode: str = "off",
        ops: tuple[str, ...] = ALL_OPS,
        settle_s: float = 2.0,
        fresh_s: float = 5.0,
        log_dir: str | None = None,
        stderr: bool = True,
        serialize: bool = False,
        lock: str = "auto",
        lock_timeout: float = 30.0,
        yield_s: float = 0.25,
        problems: tuple[str, ...] = (),
    ) -> None:
        super().__init__(
            mode, ops, settle_s, fresh_s, log_dir, stderr, serialize, lock, lock_timeout, yield_s, problems
        )

    def _key(self) -> tuple[object, ...]:
        return self._values()[:-1]  # all but problems


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


def _flag(env: Mapping[str, str], name: str, problems: list[str]) -> bool:
    raw = env.get(name, _BY_NAME[name].default).strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    problems.append(f"{name}={env.get(name)!r} is not a boolean (use 1 or 0); using {_BY_NAME[name].default}")
    return _BY_NAME[name].default in _TRUE


def _number(env: Mapping[str, str], name: str, problems: list[str], check: Callable[[float], bool]) -> float:
    default = float(_BY_NAME[name].default)
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if value != value or not check(value):  # NaN or out of range
        problems.append(f"{name}={raw!r} is not a valid number of seconds; using {_BY_NAME[name].default}")
        return default
    return value


def load(env: Mapping[str, str]) -> Settings:
    """Read the settings from an environment mapping. Never raises."""
    problems: list[str] = []
    raw_mode = env.get("FSGUARD", "")
    mode = parse_mode(raw_mode)
    if mode is None:
        problems.append(f"FSGUARD={raw_mode!r} is not understood (use 1, 0 or force); staying off")
        mode = "off"

    ops: list[str] = []
    raw_ops = env.get("FSGUARD_OPS")
    if raw_ops is None:
        ops = list(ALL_OPS)
    else:
        unknown = []
        for name in (part.strip().lower() for part in raw_ops.split(",")):
            if not name:
                continue
            if name in ALL_OPS:
                if name not in ops:
                    ops.append(name)
            else:
                unknown.append(name)
        if unknown:
            problems.append(f"FSGUARD_OPS names unknown operation(s) {', '.join(unknown)}; known: {', '.join(ALL_OPS)}")

    lock = env.get("FSGUARD_LOCK", "auto").strip().lower() or "auto"
    if lock not in LOCK_BACKENDS:
        problems.append(
            f"FSGUARD_LOCK={env.get('FSGUARD_LOCK')!r} is not one of {', '.join(LOCK_BACKENDS)}; using auto"
        )
        lock = "auto"

    log_dir = env.get("FSGUARD_LOG", "").strip() or None

    return Settings(
        mode=mode,
        ops=tuple(op for op in ALL_OPS if op in ops),
        settle_s=_number(env, "FSGUARD_SETTLE_S", problems, lambda v: 0 <= v <= 600),
        fresh_s=_number(env, "FSGUARD_FRESH_S", problems, lambda v: 0 <= v <= 86400 * 7),
        log_dir=log_dir,
        stderr=_flag(env, "FSGUARD_STDERR", problems),
        serialize=_flag(env, "FSGUARD_SERIALIZE", problems),
        lock=lock,
        lock_timeout=_number(env, "FSGUARD_LOCK_TIMEOUT", problems, lambda v: 0 <= v <= 86400),
        yield_s=_number(env, "FSGUARD_YIELD_S", problems, lambda v: 0 <= v <= 10),
        problems=tuple(problems),
    )


def unknown_variables(env: Mapping[str, str]) -> list[str]:
    """``FSGUARD_*`` names in the environment that fsguard does not know (likely typos)."""
    return sorted(k for k in env if k.startswith("FSGUARD") and k not in _BY_NAME)
