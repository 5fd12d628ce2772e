"""One guarded call, decoded: ``Call``, bound by the signatures of ``fsguard.operations``.

The happy path decodes nothing: the wrapper calls through and remembers the raw ``(op, args, kwargs)`` tuple (``(op,
args, kwargs, time)`` for the calls that record a time). A ``Call`` is built from that only when something asks: a
failure's decision, the memory's index, the serializer keying a call, the rmtree walk. Arguments are bound by the
signatures below, as the interpreter binds them, into a ``Bound``. They are never picked out by hand. A call its
function would reject binds to nothing (no paths).
"""

from __future__ import annotations

import os
import stat

from .operations import LINKS, MAKES, MOVES, NO_FDS, OPERATIONS, Bound

TYPE_CHECKING = False  # not typing's: imported at startup (see bench/startup.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# Views of fsguard.operations' table: each guarded name's signature, and what its calls do to their paths.
_SIGNATURES: dict[str, Callable[..., Bound]] = {
    name: operation.signature for operation in OPERATIONS.values() for name in operation.names
}
_EFFECT = {name: operation.effect for operation in OPERATIONS.values() for name in operation.names}
_OPERATION = {name: operation.name for operation in OPERATIONS.values() for name in operation.names}  # unlink: remove

# The kinds of remembered entry that are a makedirs(exist_ok=True) (fsguard.patching): it made the directory
# (a name other processes make too), or found it there.
MAKEDIRS_OUTCOMES = {"makedirs-shared": "made-shared", "makedirs-found": "found"}
_UNBOUND = Bound(())


class Call:
    """One call of a guarded function, decoded, in named parts.

    The call as made: ``op``, and ``args``/``kwargs`` to make it again. ``time``: the wall-clock time after the call,
    where the wrapper recorded one. ``outcome``, for a remembered ``makedirs(exist_ok=True)``: ``made-shared`` (it made
    the directory) or ``found``. Its paths: ``given``, the path arguments as given. That is ``(path,)``, or ``(src,
    dst)`` for rename, replace, symlink and link; None for one not given; ``()`` for a call its function rejects.
    ``path`` (one-path operations), ``src`` and ``dst`` (two-path ones) are the same, normalised. Normalised means
    absolute, ``..`` folded, relative to ``cwd``; None where missing or not a path. The rest: ``fds`` (``DirFds``),
    ``options`` (``Options``) and ``on_error`` (``OnError``, rmtree's), as bound."""

    __slots__ = (
        "args",
        "dst",
        "fds",
        "given",
        "kwargs",
        "on_error",
        "op",
        "options",
        "outcome",
        "path",
        "src",
        "time",
    )

    def __init__(
        self,
        op: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        time: float | None = None,
        cwd: str | None = None,
    ) -> None:
        self.outcome = MAKEDIRS_OUTCOMES.get(op)
        if self.outcome is not None:
            op = "makedirs"
        self.op = _OPERATION.get(op, op)
        self.args = args
        self.kwargs = kwargs
        self.time = time
        try:
            bound = _SIGNATURES[op](*args, **kwargs)
        except (KeyError, TypeError):  # not a guarded operation, or a call its function rejects
            bound = _UNBOUND
        self.given = given = bound.given
        self.options = bound.options
        self.on_error = bound.on_error
        self.fds = bound.fds
        if len(given) == 2:
            self.path, self.src, self.dst = None, _norm_or_none(given[0], cwd), _norm_or_none(given[1], cwd)
        else:
            self.path, self.src, self.dst = (_norm_or_none(given[0], cwd) if given else None), None, None

    @classmethod
    def remembered(cls, entry: tuple[Any, ...], cwd: str | None = None) -> Call:
        """The call a raw memory entry stands for (``fsguard.memory``), its paths relative to ``cwd``."""
        return cls(entry[0], entry[1], entry[2], entry[3] if len(entry) > 3 else None, cwd)

    def __repr__(self) -> str:
        return f"Call({self.op!r}, {self.args!r}, {self.kwargs!r})"

    @property
    def bound(self) -> bool:
        """Whether the call binds to its function's signature. A call the function rejects has no paths."""
        return bool(self.given)

    def shown(self) -> list[Any]:
        """The path arguments as given, for a record."""
        return [p for p in self.given if p is not None]

    def targets(self) -> list[str] | None:
        """The normalised paths the call works on, or None when they cannot key it. For ``symlink``/``link``, the name
        they make; None for directory descriptors or a missing path."""
        if self.fds:
            return None
        effect = _EFFECT.get(self.op)
        if effect == MOVES:
            paths = [self.src, self.dst]
        elif effect == LINKS:
            paths = [self.dst]
        else:
            paths = [self.path]
        return None if any(p is None for p in paths) else [p for p in paths if p is not None]

    def made(self) -> tuple[str, str] | None:
        """(the path this call left something at, how: ``made``, ``made-shared`` or ``found``), if any."""
        return None if self.fds else _effects(self.op, self.outcome, self.path, self.src, self.dst)[0]

    def gone(self) -> tuple[str, str] | None:
        """(the path this call took away, how: ``removed`` or ``moved-away``), if any."""
        return None if self.fds else _effects(self.op, self.outcome, self.path, self.src, self.dst)[1]

    def arguments(self) -> list[tuple[str, Any]]:
        """The arguments other than the paths, by name, as bound, defaults included. They make two calls on the same
        paths the same call."""
        options, on_error, fds = self.options, self.on_error, self.fds
        return [
            ("mode", options.mode),
            ("exist_ok", options.exist_ok),
            ("ignore_errors", on_error.ignore_errors),
            ("onerror", on_error.onerror),
            ("onexc", on_error.onexc),
            ("follow_symlinks", options.follow_symlinks),
            ("dir_fd", fds.dir_fd),
            ("src_dir_fd", fds.src_dir_fd),
            ("dst_dir_fd", fds.dst_dir_fd),
        ]


Effect = tuple[str, str]  # (a normalised path, what a call did there)


def _effects(
    op: str, outcome: str | None, path: str | None, src: str | None, dst: str | None
) -> tuple[Effect | None, Effect | None]:
    """Where a call made something and how, and where it took something away and how. It is read from the call's
    normalised paths."""
    effect = _EFFECT.get(op)
    if effect == MAKES:
        return (None if path is None else (path, outcome or "made")), None
    if effect == LINKS:
        return (None if dst is None else (dst, "made")), None
    if effect == MOVES:
        return (None if dst is None else (dst, "made")), (None if src is None else (src, "moved-away"))
    return None, (None if path is None else (path, "removed"))


def effects(entry: tuple[Any, ...], cwd: str | None) -> tuple[Effect | None, Effect | None, float | None]:
    """What a raw memory entry did, without building the ``Call``. That is ``Call.remembered(entry, cwd)``'s ``made()``,
    ``gone()`` and ``time``. The memory's index asks this of thousands of entries at once."""
    op = entry[0]
    outcome = MAKEDIRS_OUTCOMES.get(op)
    if outcome is not None:
        op = "makedirs"
    when = entry[3] if len(entry) > 3 else None
    try:
        bound = _SIGNATURES[op](*entry[1], **entry[2])
    except (KeyError, TypeError):
        return None, None, when
    if bound.fds is not NO_FDS:  # (``_fds`` returns it exactly when no descriptor is named)
        return None, None, when
    given = bound.given
    if len(given) == 2:
        moved = _EFFECT.get(op) == MOVES
        src = _norm_or_none(given[0], cwd) if moved else None
        made, gone = _effects(op, None, None, src, _norm_or_none(given[1], cwd))
    else:
        made, gone = _effects(_OPERATION.get(op, op), outcome, _norm_or_none(given[0], cwd), None, None)
    return made, gone, when


# --- paths ---------------------------------------------------------------------------------------------


def fspath(path: Any) -> str | bytes:
    """``os.fspath``, also for the bytes-like objects ``os`` still takes. ``os``'s C functions still take a
    ``bytearray``/``memoryview`` (with a DeprecationWarning), so this gives their bytes. ``TypeError`` for anything
    else."""
    if isinstance(path, (bytearray, memoryview)):
        return bytes(path)
    value: str | bytes = os.fspath(path)
    return value


def ends_in_separator(path: Any) -> bool:
    """Whether a path argument as given ends in a separator. The kernel then names only a directory there. A ``rename``
    moves only one; a ``symlink`` or ``link`` can never be made at such a name."""
    try:
        return os.fsdecode(fspath(path)).endswith(os.sep)
    except (TypeError, ValueError):
        return False


def norm(path: Any, cwd: str | None = None) -> str:
    """Absolute text form of a path argument, as the kernel resolves it. It is relative to ``cwd`` (default: the current
    one), naming the file the call itself names. ``.`` and repeated slashes are dropped. ``..`` is resolved as the
    kernel does, after a symlink before it, never folded lexically over one. ``latest/../cache``, with ``latest`` a link
    to ``runs/run-3``, is ``runs/cache``."""
    if type(path) is str and path[:1] == "/" and "/." not in path and "//" not in path and path[-1:] != "/":
        return path  # already normal: the index normalises thousands of these at once
    value: str | bytes = fspath(path)
    text = os.fsdecode(value) if isinstance(value, bytes) else value
    if not os.path.isabs(text):
        text = os.path.join(os.getcwd() if cwd is None else cwd, text)
    if "/.." not in text:
        return os.path.normpath(text)
    return _dotdot(text)


_SYMLINKS_FOLLOWED = 40  # as the kernel's ELOOP bound


def _dotdot(path: str) -> str:
    """``path`` (absolute) with each ``..`` applied as the kernel applies it. A component before a ``..`` that is a
    symlink is replaced by the link's target first. That costs one ``lstat`` per ``..`` and a ``readlink`` per link.
    Where a component cannot be read (missing: the call fails there too), the rest stays as given."""
    pending = [part for part in reversed(path.split("/")) if part and part != "."]
    resolved: list[str] = []
    links = 0
    while pending:
        part = pending.pop()
        if part != "..":
            resolved.append(part)
            continue
        if not resolved:
            continue  # "/.." is "/"
        here = "/" + "/".join(resolved)
        try:
            is_link = stat.S_ISLNK(os.lstat(here).st_mode)
            target = os.readlink(here) if is_link else ""
        except (OSError, ValueError):
            return "/" + "/".join([*resolved, part, *reversed(pending)])
        resolved.pop()
        if not is_link:
            continue
        links += 1
        if links > _SYMLINKS_FOLLOWED:
            return "/" + "/".join([*resolved, "..", *reversed(pending)])  # ELOOP: the call fails too
        if target.startswith("/"):
            resolved = []
        pending.append("..")
        pending.extend(part for part in reversed(target.split("/")) if part and part != ".")
    return "/" + "/".join(resolved)


def _norm_or_none(path: Any, cwd: str | None) -> str | None:
    if path is None:
        return None
    try:
        return norm(path, cwd)
    except (TypeError, ValueError, OSError):  # OSError: a relative path in a deleted working directory
        return None


# --- what the wrapper asks on its way (cheap: no Call) ---------------------------------------------------

# Operations whose calls with directory descriptors pass straight through (neither decided nor remembered:
# the standard rmtree makes one ``unlink(name, dir_fd=...)`` per file), and whose failures inside the standard
# library's own code are left to that code (os.makedirs's mkdir, shutil's walks, tempfile's name claims).
FAMILY = frozenset(operation.name for operation in OPERATIONS.values() if operation.passes_fds)


def fds_given(kwargs: dict[str, Any]) -> bool:
    """Whether a call's keyword arguments name a directory descriptor."""
    return (
        kwargs.get("dir_fd") is not None or kwargs.get("src_dir_fd") is not None or kwargs.get("dst_dir_fd") is not None
    )


def _makedirs_shared(name: Any = None, mode: Any = 0o777, exist_ok: Any = False) -> tuple[Any, Any] | None:
    return (name, mode) if exist_ok else None


def makedirs_exist_ok(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
    """(name, mode) of a ``makedirs`` call with ``exist_ok`` true, else None. Also None for a call ``makedirs`` rejects.
    The same signature as ``_makedirs``, without building a ``Call``: every ``makedirs(exist_ok=True)`` asks."""
    if len(args) == 1 and len(kwargs) == 1 and "exist_ok" in kwargs:  # the common spelling, bound at once
        return (args[0], 0o777) if kwargs["exist_ok"] else None
    try:
        return _makedirs_shared(*args, **kwargs)
    except TypeError:
        return None


def resolve_fds(entry: tuple[Any, ...]) -> tuple[Any, ...]:
    """A raw entry whose call used directory descriptors, with its paths resolved through ``/proc/self/fd``.

    Called at once, on the happy path, for calls with keyword arguments only: the descriptors may be closed by
    the time a decision asks. Unresolvable entries are returned unchanged (the index skips them)."""
    op, args, kwargs = entry[0], entry[1], entry[2]
    if not fds_given(kwargs):
        return entry
    call = Call(op, args, kwargs)
    if not call.bound or any(p is None for p in call.given):
        return entry
    paths = list(call.given)
    try:
        fds = call.fds
        for position, fd in enumerate((fds.src_dir_fd, fds.dst_dir_fd) if len(paths) == 2 else (fds.dir_fd,)):
            if fd is not None:
                value: str | bytes = os.fspath(paths[position])
                text = os.fsdecode(value) if isinstance(value, bytes) else value
                paths[position] = os.path.join(os.readlink(f"/proc/self/fd/{fd}"), text)
    except (OSError, TypeError, ValueError):
        return entry
    return (op, tuple(paths), {}, *entry[3:])


def first_path(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A call's first path argument as given, or None. It is the very object: identity matters to the caller."""
    if args and not kwargs:  # every signature here takes its first path first: no binding needed
        return args[0]
    try:
        return _SIGNATURES[op](*args, **kwargs).given[0]
    except (KeyError, TypeError):
        return None
