"""Every guarded operation, one ``Operation`` each. Other modules' registries are views of this one table.

What one operation is: the function it guards (``target``, and ``also``: further names guarded as it), its
signature, its rule in ``fsguard/guards/``, what it does to its paths (``effect``), whether its rule may wait for
evidence, whether identical calls of ranks can be shared, and which ``pathlib`` methods call it. A new operation
is one row of ``OPERATIONS`` and one rule module (CONTRIBUTING, "A new operation").
"""

from __future__ import annotations

from ._values import Frozen

TYPE_CHECKING = False  # not typing's: imported at startup (see bench/startup.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class DirFds:
    """The directory descriptors a call names its paths relative to. These are ``dir_fd``, and ``src_dir_fd`` and
    ``dst_dir_fd`` of rename, replace and link. False when it names none."""

    __slots__ = ("dir_fd", "dst_dir_fd", "src_dir_fd")

    def __init__(self, dir_fd: Any = None, src_dir_fd: Any = None, dst_dir_fd: Any = None) -> None:
        self.dir_fd = dir_fd
        self.src_dir_fd = src_dir_fd
        self.dst_dir_fd = dst_dir_fd

    def __bool__(self) -> bool:
        return self.dir_fd is not None or self.src_dir_fd is not None or self.dst_dir_fd is not None


class Options:
    """What a call asks for besides its paths, as given. ``mode`` (mkdir, makedirs; None for the others), ``exist_ok``
    (makedirs) and ``follow_symlinks`` (link). Read them for their truth, as the functions do."""

    __slots__ = ("exist_ok", "follow_symlinks", "mode")

    def __init__(self, mode: Any = None, exist_ok: Any = False, follow_symlinks: Any = True) -> None:
        self.mode = mode
        self.exist_ok = exist_ok
        self.follow_symlinks = follow_symlinks


class OnError:
    """What an ``rmtree`` call does with its walk's errors, as given. ``ignore_errors`` ignores them, read for its
    truth. Otherwise they go to the caller's ``onerror`` or ``onexc`` (None where not given)."""

    __slots__ = ("ignore_errors", "onerror", "onexc")

    def __init__(self, ignore_errors: Any = False, onerror: Any = None, onexc: Any = None) -> None:
        self.ignore_errors = ignore_errors
        self.onerror = onerror
        self.onexc = onexc


NO_FDS = DirFds()
NO_OPTIONS = Options()
NO_ON_ERROR = OnError()


def _fds(dir_fd: Any = None, src_dir_fd: Any = None, dst_dir_fd: Any = None) -> DirFds:
    if dir_fd is None and src_dir_fd is None and dst_dir_fd is None:
        return NO_FDS  # the common case, with no object made: every rmtree call builds its Call
    return DirFds(dir_fd, src_dir_fd, dst_dir_fd)


def _on_error(ignore_errors: Any, onerror: Any, onexc: Any) -> OnError:
    if ignore_errors is False and onerror is None and onexc is None:
        return NO_ON_ERROR
    return OnError(ignore_errors, onerror, onexc)


class Bound:
    """A call's arguments as its function binds them. The path arguments as given: None for one not given, ``()`` for a
    call its function rejects. The others in named parts, with the function's defaults. Parts are read, never assigned:
    a call that gives none of a part's arguments shares one default part."""

    __slots__ = ("fds", "given", "on_error", "options")

    def __init__(
        self,
        given: tuple[Any, ...],
        options: Options = NO_OPTIONS,
        on_error: OnError = NO_ON_ERROR,
        fds: DirFds = NO_FDS,
    ) -> None:
        self.given = given
        self.options = options
        self.on_error = on_error
        self.fds = fds


# --- the signatures (a missing path binds to None: the call itself says what is wrong) -------------------
# Each returns its Bound with every part given in order (positional: a third cheaper, and every rmtree call binds).


def _makedirs(name: Any = None, mode: Any = 0o777, exist_ok: Any = False) -> Bound:
    return Bound((name,), Options(mode, exist_ok))


def _mkdir(path: Any = None, mode: Any = 0o777, *, dir_fd: Any = None) -> Bound:
    return Bound((path,), Options(mode), NO_ON_ERROR, _fds(dir_fd))


def _remove(path: Any = None, *, dir_fd: Any = None) -> Bound:  # remove, unlink, rmdir
    return Bound((path,), NO_OPTIONS, NO_ON_ERROR, _fds(dir_fd))


def _rename(src: Any = None, dst: Any = None, *, src_dir_fd: Any = None, dst_dir_fd: Any = None) -> Bound:
    return Bound((src, dst), NO_OPTIONS, NO_ON_ERROR, _fds(None, src_dir_fd, dst_dir_fd))


def _symlink(src: Any = None, dst: Any = None, target_is_directory: Any = False, *, dir_fd: Any = None) -> Bound:
    return Bound((src, dst), NO_OPTIONS, NO_ON_ERROR, _fds(dir_fd))


def _link(
    src: Any = None, dst: Any = None, *, src_dir_fd: Any = None, dst_dir_fd: Any = None, follow_symlinks: Any = True
) -> Bound:
    return Bound((src, dst), Options(None, False, follow_symlinks), NO_ON_ERROR, _fds(None, src_dir_fd, dst_dir_fd))


def _rmtree(
    path: Any = None, ignore_errors: Any = False, onerror: Any = None, *, onexc: Any = None, dir_fd: Any = None
) -> Bound:
    return Bound((path,), NO_OPTIONS, _on_error(ignore_errors, onerror, onexc), _fds(dir_fd))


# --- the operations ----------------------------------------------------------------------------------------

# What an operation does to its paths (``Operation.effect``): makes a directory at its one path, makes a name at
# its second (symlink, link), moves its first path to its second, or takes its one path away.
MAKES, LINKS, MOVES, REMOVES = "makes", "links", "moves", "removes"


class Operation(Frozen):
    """One guarded operation. What it wraps, how its calls bind, which rule decides, and how ranks share it."""

    _fields = (
        "name",
        "target",
        "also",
        "signature",
        "rule",
        "effect",
        "waits",
        "waits_alone",
        "shared",
        "passes_fds",
        "pathlib",
    )
    __slots__ = _fields
    name: str  # the operation's name: FSGUARD_OPS, records, the memory's entries
    target: tuple[str, str]  # (module, attribute) of the function it wraps
    also: tuple[str, ...]  # further attributes of that module guarded under its name (os.unlink, as remove)
    signature: Callable[..., Bound]  # binds a call's arguments as the function does
    rule: str | None  # the module of fsguard/guards/ whose ``decide`` judges a failure (rmtree: its walk)
    effect: str  # MAKES, LINKS, MOVES or REMOVES
    waits: type[OSError] | None  # the error whose rule may wait up to FSGUARD_SETTLE_S for evidence
    waits_alone: bool  # ... in a single-node job only (a peer's journal note may be one write behind)
    shared: bool  # identical calls of ranks are performed once, serialized (fsguard.locks.flight)
    passes_fds: bool  # calls with directory descriptors pass through; the standard library's own calls are its own
    pathlib: tuple[str, ...]  # pathlib.Path methods that call it and settle their own arguments (fsguard.oracle)

    def __init__(
        self,
        name: str,
        target: tuple[str, str],
        signature: Callable[..., Bound],
        rule: str | None,
        effect: str,
        *,
        also: tuple[str, ...] = (),
        waits: type[OSError] | None = None,
        waits_alone: bool = False,
        shared: bool = False,
        passes_fds: bool = False,
        pathlib: tuple[str, ...] = (),
    ) -> None:
        values = (name, target, also, signature, rule, effect, waits, waits_alone, shared, passes_fds, pathlib)
        super().__init__(*values)

    @property
    def names(self) -> tuple[str, ...]:
        """The operation's name and the further attributes guarded as it."""
        return (self.name, *self.also)

    @property
    def wraps(self) -> tuple[tuple[str, str, str], ...]:
        """(guarded name, module, attribute) of each function it wraps: its target, then ``also``'s."""
        module, attribute = self.target
        return ((self.name, module, attribute), *((name, module, name) for name in self.also))

    @property
    def timed(self) -> bool:
        """Whether a call is remembered with its time. A later decision tells this process's own old move of a reused
        temp name from a peer's newer one by the destination's ctime (fsguard.guards.rename)."""
        return self.effect == MOVES or self.effect == LINKS

    @property
    def takes_away(self) -> bool:
        """Whether a call moves or removes a path. It ends a shared outcome (fsguard.locks)."""
        return self.effect == MOVES or self.effect == REMOVES


OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        Operation(
            "makedirs",
            ("os", "makedirs"),
            _makedirs,
            "makedirs",
            MAKES,
            waits=FileExistsError,
            waits_alone=True,
            shared=True,
        ),
        Operation(
            "rename",
            ("os", "rename"),
            _rename,
            "rename",
            MOVES,
            waits=FileNotFoundError,
            shared=True,
            pathlib=("rename",),
        ),
        Operation(
            "replace",
            ("os", "replace"),
            _rename,
            "rename",
            MOVES,
            waits=FileNotFoundError,
            shared=True,
            pathlib=("replace",),
        ),
        # wrapped when the program imports shutil (fsguard/_later.py)
        Operation("rmtree", ("shutil", "rmtree"), _rmtree, None, REMOVES, shared=True),
        Operation(
            "remove",
            ("os", "remove"),
            _remove,
            "remove",
            REMOVES,
            also=("unlink",),
            passes_fds=True,
            pathlib=("unlink",),
        ),
        # the same evidence as remove: a missing name, a directory a peer changed moments ago
        Operation("rmdir", ("os", "rmdir"), _remove, "remove", REMOVES, passes_fds=True, pathlib=("rmdir",)),
        Operation(
            "mkdir",
            ("os", "mkdir"),
            _mkdir,
            "mkdir",
            MAKES,
            waits=FileExistsError,
            waits_alone=True,
            passes_fds=True,
            pathlib=("mkdir",),
        ),
        Operation("symlink", ("os", "symlink"), _symlink, "symlink", LINKS, passes_fds=True, pathlib=("symlink_to",)),
        Operation("link", ("os", "link"), _link, "link", LINKS, passes_fds=True, pathlib=("hardlink_to",)),
    )
}
