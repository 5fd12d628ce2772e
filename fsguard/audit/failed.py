"""What one traceback says: which operation failed, with which error, proving a crash or not.

``fsguard.audit.scan`` asks this of every traceback it reads; ``fsguard.audit.findings`` groups the answers.
"""

from __future__ import annotations

import errno
import re

from .tracebacks import Frame, Traceback

OS_ERRORS = {
    "OSError": None,
    "IOError": None,
    "EnvironmentError": None,
    "FileExistsError": "EEXIST",
    "FileNotFoundError": "ENOENT",
    "PermissionError": "EACCES",
    "IsADirectoryError": "EISDIR",
    "NotADirectoryError": "ENOTDIR",
}
# Functions of the standard library whose frame names the operation (outermost wins: shutil.move over
# the os.rename inside it).
_STDLIB_OPS = {
    "makedirs": "makedirs",
    "mkdir": "mkdir",
    "rename": "rename",
    "replace": "replace",
    "rmtree": "rmtree",
    "_rmtree_safe_fd": "rmtree",
    "_rmtree_safe_fd_step": "rmtree",
    "_rmtree_unsafe": "rmtree",
    "move": "move",
    "unlink": "remove",  # pathlib's Path.unlink
    "rmdir": "rmdir",  # pathlib's Path.rmdir
    "symlink_to": "symlink",
    "hardlink_to": "link",
}
_CALL = re.compile(
    r"(?P<qual>\b(?:os|shutil)\.)?\b(?P<op>makedirs|mkdir|rename|replace|rmtree|move|remove|unlink|rmdir|symlink|link)\s*\("
)
_ALIASES = {"unlink": "remove"}  # one operation name for both functions, as FSGUARD_OPS has it
_INTERNAL = re.compile(
    r"^<frozen |[/\\][Ll]ib[/\\]python\d[\d.]*[/\\](?!site-packages|dist-packages)[^/\\]+"
    r"(?:[/\\][^/\\]+)?\.py$|[/\\](?:fsguard|wrapt)[/\\][^/\\]+\.py$"
)
# fsguard's own wrappers and wrapt's (a log of a guarded job): their frames are named after no operation.
_WRAPPER = re.compile(r"[/\\](?:fsguard|wrapt)[/\\][^/\\]+\.py$")
_ERRNO = re.compile(
    r"\[Errno (?P<num>\d+)\] (?P<text>.*?)(?:: (?P<a>'[^']*'|\"[^\"]*\")"
    r"(?: -> (?P<b>'[^']*'|\"[^\"]*\"))?)?$"
)
_WRAPPED = re.compile(r"\s*(?P<type>[A-Za-z_][\w.]*Error): (?P<message>\[Errno \d+\] .*)$")


def _internal(frame: Frame) -> bool:
    return bool(_INTERNAL.search(frame.file))


def operation(frames: list[Frame]) -> tuple[str | None, Frame | None]:
    """The filesystem operation that raised, and the program's frame that called it (the call site)."""
    site_at = next((i for i in range(len(frames) - 1, -1, -1) if not _internal(frames[i])), None)
    site = frames[site_at] if site_at is not None else None
    below = frames[site_at + 1 :] if site_at is not None else frames
    for frame in below:  # outermost library frame first
        if frame.function in _STDLIB_OPS and not _WRAPPER.search(frame.file):
            return _STDLIB_OPS[frame.function], site
    if site is None or not site.source:
        return None, site
    calls = list(_CALL.finditer(site.source))
    if site.caret >= 0:
        calls = [c for c in calls if c.start() >= site.caret] or calls
    else:
        calls = [c for c in calls if c.group("qual")] or calls
    op = calls[0].group("op") if calls else None
    return _ALIASES.get(op, op) if op else None, site


# The first frame of a thread or process: an error that reaches it ends the thread (the default hooks).
_TOP = re.compile(
    r"(?:^<frozen runpy>$|[/\\]runpy\.py$)|(?P<threading>[/\\]threading\.py$)"
    r"|(?P<process>[/\\]multiprocessing[/\\]process\.py$)|(?P<record>[/\\]torch[/\\]distributed[/\\]elastic[/\\]multiprocessing[/\\]errors[/\\]__init__\.py$)"
)
# Standard modules whose frames on the way say the error was carried or may be suppressed.
_CARRIED = re.compile(
    r"[/\\](?:contextlib\.py|asyncio[/\\][^/\\]+\.py|concurrent[/\\]futures[/\\][^/\\]+\.py"
    r"|multiprocessing[/\\]pool\.py|socketserver\.py|unittest[/\\][^/\\]+\.py)$"
)
_CONTEXT_LINE = re.compile(r"^(?:async\s+)?with\b|^yield\b|(?:^|[=(\s])await\s")


def _top(frame: Frame) -> bool:
    """Whether ``frame`` is the first of a thread or process. A thread's first frame is a script's module, runpy, or a
    thread's or process's bootstrap. It is also the re-raising ``@record`` wrapper of torch's elastic agent, where its
    summary's copy starts."""
    if frame.function == "<module>":
        return True
    found = _TOP.search(frame.file)
    if found is None:
        return False
    if found["threading"]:
        return frame.function in ("_bootstrap", "_bootstrap_inner")
    if found["process"]:
        return frame.function == "_bootstrap"
    return not found["record"] or frame.function == "wrapper"


def unproven(tb: Traceback) -> str | None:
    """Why a traceback cannot prove its error ended its thread unhandled, or None. The reasons: the exception was
    handled (another followed it), or was raised while handling another. Or it never reaches a thread's top. Or it
    passed through a frame that carries errors (a future, a task) or may suppress them (a context manager's exit, a
    generator)."""
    if tb.chained:
        return "the program handled it (another exception followed during its handling)"
    if tb.handling:
        return "it was raised while the program handled an earlier exception"
    if not tb.frames or not _top(tb.frames[0]):
        return "its traceback does not start at the top of a thread (a handler caught it there, or printed it)"
    for frame in tb.frames:
        if _CARRIED.search(frame.file) or frame.function in ("__exit__", "__aexit__"):
            return f"it passed through {frame.text()}, which may carry or suppress it"
        if _CONTEXT_LINE.search(frame.source):
            return f"it passed through a context at {frame.text()} ({frame.source})"
    return None


def _unquote(text: str | None) -> str | None:
    return text[1:-1] if text else None


def parse_error(exception: str, message: str) -> tuple[str, str | None, list[str]] | None:
    """``(type, errno name, paths)`` of an OSError's exception line, or None for any other exception.

    An OSError that a library re-raised inside its own exception counts as that OSError. The library's message holds the
    original's type and text (torch's ``InductorError: FileNotFoundError: [Errno 2] ...``). The frames are the
    original's (``with_traceback``), down to the failing call."""
    name = exception.rsplit(".", 1)[-1]
    if name not in OS_ERRORS:
        wrapped = _WRAPPED.match(message)
        if wrapped is None or wrapped["type"].rsplit(".", 1)[-1] not in OS_ERRORS:
            return None
        name, message = wrapped["type"].rsplit(".", 1)[-1], wrapped["message"]
    match = _ERRNO.match(message)
    if match is None:
        return name, OS_ERRORS[name], []
    errno_name = errno.errorcode.get(int(match["num"]), OS_ERRORS[name])
    paths = [p for p in (_unquote(match["a"]), _unquote(match["b"])) if p is not None]
    return name, errno_name, paths
