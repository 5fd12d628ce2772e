"""Path patterns: the paths of one call site, folded so that one line stands for all of them.

Each path component is folded on its own, in this order (the first rules protect their text from the last):

* ``tempfile`` names: ``tmpa8f_3kq1`` becomes ``tmp*``;
* NFS silly-rename files: ``.nfs00000000012f0000001a`` becomes ``.nfs*``;
* UUIDs become ``<uuid>``; runs of 8 or more hex digits with a digit and a letter (hashes) ``<hex>``;
* whatever follows a temp suffix: ``model.pt.tmp.12345`` becomes ``model.pt.tmp*``;
* every run of digits: ``checkpoint-49`` becomes ``checkpoint-<n>``.

So ``checkpoint-49`` and ``checkpoint-50`` become ``checkpoint-<n>``, ``rank3.tmp.81234`` and
``rank0.tmp.77`` become ``rank<n>.tmp*``. A ``tmp-`` *prefix* is kept (``tmp-checkpoint-<n>``): it says
what the path is for, where a random suffix says nothing.
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
_DIGITS = re.compile(r"\d+")


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
    return _DIGITS.sub("<n>", name) + suffix


def fold(path: str) -> str:
    """The pattern of one path (components folded, separators kept)."""
    return "/".join(fold_component(part) if part else part for part in path.split("/"))


def fold_args(args: list[str]) -> str:
    """The pattern of an operation's path arguments: ``src -> dst`` for a rename."""
    return " -> ".join(fold(arg) for arg in args)
