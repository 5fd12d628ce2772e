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
# A staging or temporary tree: what a job commits with a rename (``tmp-checkpoint-5``, ``ckpt.tmp``, ``staging``).
_STAGING = re.compile(r"(?i)(?:^|[-_.~])(?:tmp|temp|staging|partial|incomplete)(?:[-_.~]|$)|^tmp[a-z0-9_]{6,12}$")

STAGING_RMTREE_WHY = (
    "the removed tree is a staging/temporary one: when a peer commits it with a rename (rank 0's "
    "os.rename(tmp-checkpoint, checkpoint) while other ranks clean it up), this race loses data, silently "
    "once the error is absorbed: the removal empties the tree before the rename, or keeps unlinking inside "
    "the renamed checkpoint. fsguard's fix, the rule 'the rename wins': FSGUARD=1 waits up to "
    "FSGUARD_YIELD_S for a peer's rename of a fresh peer tree and stops removing a tree moved away "
    "mid-walk (hazard record); FSGUARD_SERIALIZE=1 lets an announced rename go first with certainty. "
    "Better still: remove the staging directory only on the rank that renames it."
)


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


def is_staging(path: str) -> bool:
    """Whether a path names a staging or temporary tree (any component: ``.../tmp-checkpoint-5/shard``)."""
    return any(_STAGING.search(part) for part in path.split("/") if part)


_STAGING_WORD = re.compile(r"(?i)tmp|temp|staging|partial|incomplete")


def mentions_staging(source: str) -> bool:
    """Whether a call's source line names a staging or temporary tree (``shutil.rmtree(staging_dir)``): the
    standard rmtree's errors name the entry (often relative to a directory descriptor), not the tree."""
    _, _, call = source.partition("rmtree(")
    return bool(_STAGING_WORD.search(call))


def fold(path: str) -> str:
    """The pattern of one path (components folded, separators kept)."""
    return "/".join(fold_component(part) if part else part for part in path.split("/"))


def fold_args(args: list[str]) -> str:
    """The pattern of an operation's path arguments: ``src -> dst`` for a rename."""
    return " -> ".join(fold(arg) for arg in args)
