"""Path patterns: one call site's paths, folded into one line.

Each path component is folded on its own. Only a *number or a random run as a whole* changes, so names stay readable
(``fsguard-demo-h7gtusfl`` stays as it is):

* ``tempfile`` names: ``tmpa8f_3kq1`` becomes ``tmp*``;
* NFS silly-rename files: ``.nfs00000000012f0000001a`` becomes ``.nfs*``;
* UUIDs become ``<uuid>``; runs of 8 or more hex digits with a digit and a letter (hashes) ``<hex>``;
* whatever follows a temp suffix: ``model.pt.tmp.12345`` becomes ``model.pt.tmp*``;
* a word between separators (``-_.~+=,@``) that is all digits: ``checkpoint-49`` becomes ``checkpoint-<n>``;
  a word of letters ending in digits, a counter: ``rank3`` becomes ``rank<n>``. Digits *inside* a word
  (``h7gtusfl``, ``x86``... with a letter after them) are kept.

A ``tmp-`` *prefix* is kept (``tmp-checkpoint-<n>``): it says what the path is for, where a random suffix
says nothing.
"""

from __future__ import annotations

import re

_TEMPFILE = re.compile(r"^tmp[a-z0-9_]{6,12}$")
_NFS = re.compile(r"^\.nfs[0-9a-fA-F]{8,}$")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX = re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}(?![0-9A-Za-z])")
# ``name.tmp.123``, ``name-partial-x7``; ``name.tmpXy12`` (no separator) only after ``tmp``.
_TEMP_SUFFIX = re.compile(
    r"(?i)([.~_-](?:tmp|temp|partial|part|incomplete))(?:[.~_-][A-Za-z0-9_]+|(?<=tmp)[A-Za-z0-9]+)$"
)
_WORD = re.compile(r"[^-_.~+=,@ ]+")
_COUNTER = re.compile(r"^(?P<word>[A-Za-z]*)\d+$")


def _fold_word(match: re.Match[str]) -> str:
    word = match.group(0)
    if word.startswith("<") and word.endswith(">"):
        return word
    counter = _COUNTER.match(word)
    return counter["word"] + "<n>" if counter else word


# A staging or temporary tree: what a job commits with a rename (``tmp-checkpoint-5``, ``ckpt.tmp``, ``staging``).
_STAGING = re.compile(r"(?i)(?:^|[-_.~])(?:tmp|temp|staging|partial|incomplete)(?:[-_.~]|$)|^tmp[a-z0-9_]{6,12}$")


def fold_component(name: str) -> str:
    if _TEMPFILE.match(name):
        return "tmp*"
    if _NFS.match(name):
        return ".nfs*"
    name = _UUID.sub("<uuid>", name)
    name = _HEX.sub("<hex>", name)
    suffix = ""
    match = _TEMP_SUFFIX.search(name)
    if match:
        suffix = match.group(1) + "*"
        name = name[: match.start()]
    return _WORD.sub(_fold_word, name) + suffix


def is_staging(path: str) -> bool:
    """Whether a path names a staging or temporary tree (any component: ``.../tmp-checkpoint-5/shard``)."""
    return any(_STAGING.search(part) for part in path.split("/") if part)


_STAGING_WORD = re.compile(r"(?i)tmp|temp|staging|partial|incomplete")


def mentions_staging(source: str) -> bool:
    """Whether a call's source line names a staging or temporary tree. Example: ``shutil.rmtree(staging_dir)``. The
    standard rmtree's errors name the entry, often relative to a directory descriptor, not the tree."""
    _, _, call = source.partition("rmtree(")
    return bool(_STAGING_WORD.search(call))


def fold(path: str) -> str:
    """The pattern of one path (components folded, separators kept)."""
    return "/".join(fold_component(part) if part else part for part in path.split("/"))


def fold_args(args: list[str]) -> str:
    """The pattern of an operation's path arguments: ``src -> dst`` for a rename."""
    return " -> ".join(fold(arg) for arg in args)


def shorten(pattern: str, width: int) -> str:
    """``pattern`` in about ``width`` characters, cut in the *middle* of each path (``/tmp/.../run/ckpt-<n>``).

    Each path keeps its first component and as many of its last ones as fit. A rename's two sides keep the same number.
    The last component stays whole, since the name is what a person looks for. Only when it alone is wider than its
    share does its middle go too (a hash, usually), keeping its start and end.
    """
    if len(pattern) <= width:
        return pattern
    paths = pattern.split(" -> ")
    most = max(len(p.split("/")) for p in paths)
    for keep in range(most - 1, 0, -1):
        text = " -> ".join(_keep_last(p, keep) for p in paths)
        if len(text) <= width:
            return text
    share = max((width - 4 * (len(paths) - 1)) // len(paths), 16)
    return " -> ".join(_cut_name(_keep_last(p, 1), share) for p in paths)


def _cut_name(path: str, width: int) -> str:
    """``path`` (``/tmp/.../name``) in ``width`` characters by cutting its last component in the middle."""
    if len(path) <= width:
        return path
    head, _, name = path.rpartition("/")
    room = width - len(head) - 1 - 3  # the slash and "..."
    if room < 8:
        return path  # nothing sensible left to keep: whole
    front = room // 3
    return f"{head}/{name[:front]}...{name[len(name) - (room - front) :]}"


def _keep_last(path: str, keep: int) -> str:
    """``path`` shortened to its first component, ``...`` and its last ``keep`` components. Whole when that is all."""
    parts = path.split("/")
    first = 2 if parts[0] == "" else 1  # "/tmp" or "relative"
    if len(parts) - first <= keep:
        return path
    text = "/".join(parts[:first]) + "/.../" + "/".join(parts[-keep:])
    return text if len(text) < len(path) else path  # "..." for one short component saves nothing
