"""``os.makedirs``: absorb ``FileExistsError`` when a peer of this job created the directory.

Absorbed:
  * ``exist_ok=False``: the ``os.mkdir`` rule (:func:`fsguard.guards.mkdir.made_by_peer`): the path is now a
    directory, it changed during this job, and this process's own guarded calls did not make it (nor
    anything below it);
  * ``exist_ok=True``: the fresh parent listing shows a directory although the (cached) lookup said it
    was missing: a peer's ``mkdir`` that this node's lookup cache has not seen yet.
Re-raised: a file or symlink in the way, a directory older than the job, one this process made itself,
and every other error.
"""

from __future__ import annotations

import errno
from typing import Any

from .. import evidence
from . import Rules, Verdict, absorb, reraise
from .mkdir import directory_in_listing, made_by_peer


def decide(error: OSError, args: tuple[Any, ...], kwargs: dict[str, Any], rules: Rules) -> Verdict:
    if error.errno != errno.EEXIST:
        return reraise()
    name = args[0] if args else kwargs.get("name")
    if name is None:
        return reraise()
    exist_ok = bool(args[2] if len(args) > 2 else kwargs.get("exist_ok", False))
    path = evidence.norm(name)
    if not exist_ok:
        return made_by_peer(path, rules)

    seen, waited = evidence.settle(lambda: directory_in_listing(path), rules.settle_s)
    if not seen:
        return reraise("not a directory in its parent's listing", waited)
    return absorb("directory present in a fresh listing of its parent (lookup cache was stale)", waited)
