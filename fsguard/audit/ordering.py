"""Ordering races outside the guarded calls. A peer moved or removed a staging directory while this rank still listed or
wrote into it.

No patch of ``os.*`` can fix these: the write itself is lost. So ``scan`` reports them ``not fixable``; but they are
races, and they make its exit status 1. A missing path alone proves nothing (a typo, an input that was never there), so
one is called an ordering race only when both hold:

1. the missing directory *is a staging directory*: its name says so (``tmp-checkpoint-1``, ``ckpt.tmp``,
   ``.staging``, ``partial``...; ``/tmp`` or a directory *under* one does not count), and
2. the inputs show a peer at it: another rank failed on the same directory, or a rename, replace, move or
   rmtree of this directory (or of one inside or above it) failed because its source was already gone.

A staging directory missing for one rank, with nothing else in the inputs, is listed ``not fixable``. It does not count
as a race. Anything else missing (``/data/train.csv``) is not listed at all, like a disk full or a permission error.
"""

from __future__ import annotations

import os
import re

from .tracebacks import Frame

# The messages of the three writers seen in crashed jobs, besides an OSError's ``[Errno 2]``.
_TORCH_PARENT = re.compile(r"Parent directory (?P<dir>.+?) does not exist\.?$")
_RUST_ENOENT = re.compile(r"No such file or directory \(os error 2\)|code: 2, kind: NotFound")
_AT_PATH = re.compile(r"""at path (?:"(?P<a>[^"]+)"|'(?P<b>[^']+)')""")
_STAGING_WORD = re.compile(
    r"(?i)(?:^|[-_.~])(?:tmp|temp|staging|stage|stg|partial|incomplete|in[-_]?progress|wip|unfinished)(?:$|[-_.~\d])"
)
_TEMPFILE = re.compile(r"^tmp[a-z0-9_]{6,12}$")
_CALL = re.compile(r"(?P<name>[A-Za-z_][\w.]*)\s*\(")
_LISTING = ("listdir", "scandir", "iterdir", "walk", "glob", "chdir", "rmdir")
_PACKAGES = re.compile(r"[/\\](?:site|dist)-packages[/\\]|^<frozen |[/\\][Ll]ib[/\\]python\d[\d.]*[/\\]")

WHY = (
    "an ordering bug, not a filesystem race fsguard can absorb: a peer moved or removed the staging "
    "directory {dir} while this rank still {verb} it; no patch of os.* can fix that: have every rank "
    "finish writing (a barrier) before one rank renames or removes it, or give each rank its own staging "
    "directory."
)
WHY_UNPROVEN = (
    "a staging directory ({dir}) was missing, but nothing in the inputs shows another rank moving or "
    "removing it (no other rank failed on it, no rename or rmtree of it was printed): listed, not counted "
    "as a race."
)


def staging_like(directory: str) -> bool:
    """Does the directory's own name say it is a staging or temporary directory?"""
    name = os.path.basename(directory.rstrip("/"))
    if not name or (name in ("tmp", "temp") and os.path.dirname(directory.rstrip("/")) in ("/", "/var", "")):
        return False
    return bool(_STAGING_WORD.search(name) or _TEMPFILE.match(name))


def program_site(frames: list[Frame]) -> Frame | None:
    """The innermost frame of the program itself (not the standard library, not an installed package)."""
    for frame in reversed(frames):
        if not _PACKAGES.search(frame.file) and "/fsguard/" not in frame.file:
            return frame
    return frames[-1] if frames else None


def call_name(site: Frame | None) -> str:
    """The call under the carets of the program's frame: ``listdir``, ``open``, ``torch.save``, ``save_file``."""
    if site is None or not site.source:
        return "?"
    calls = list(_CALL.finditer(site.source))
    if site.caret >= 0:
        calls = [c for c in calls if c.start() >= site.caret] or calls
    if not calls:
        return "?"
    parts = calls[0]["name"].split(".")
    if len(parts) > 1 and parts[-2] == "torch":
        return "torch.save" if parts[-1] == "save" else ".".join(parts[-2:])
    return parts[-1]


def missing(exception: str, message: str, errno_name: str | None, paths: list[str], call: str) -> list[str]:
    """The directories this error says are missing, most likely first; [] for another error."""
    name = exception.rsplit(".", 1)[-1]
    if name == "RuntimeError":
        match = _TORCH_PARENT.search(message)
        return [match["dir"]] if match else []
    if errno_name == "ENOENT" and paths:
        path = paths[0].rstrip("/")
        if call in _LISTING:
            return [path]
        return [path, os.path.dirname(path)]
    if name not in ("OSError", "IOError", "FileNotFoundError") and _RUST_ENOENT.search(message):
        match = _AT_PATH.search(message)
        if match:
            path = (match["a"] or match["b"]).rstrip("/")
            return [os.path.dirname(path), path]
    return []


def verb(call: str) -> str:
    return "listed" if call in _LISTING else "wrote into"


def related(directory: str, moved: str) -> bool:
    """Whether ``moved`` is the directory itself, one inside it, or one above it. ``moved`` is a path a peer renamed or
    removed."""
    directory, moved = directory.rstrip("/"), moved.rstrip("/")
    return directory == moved or directory.startswith(moved + "/") or moved.startswith(directory + "/")
