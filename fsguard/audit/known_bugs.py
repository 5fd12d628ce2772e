"""Library bugs no patch of ``os.*`` fixes: how their tracebacks look, and the library's fix."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .tracebacks import Frame, Traceback


@dataclass(frozen=True)
class KnownBug:
    """Library code whose failures are the library's own ordering or shared-writer bug. Whatever error they end in,
    these failures are the library's bug when its ranks run it together. No patch of ``os.*`` can fix them; the fix is
    the program's."""

    op: str  # shown in the OP column
    file: re.Pattern[str]  # a frame of the library, by its file
    functions: frozenset[str]  # ... and its function
    errors: frozenset[str]  # exception types (last dotted part) that this bug ends in
    why: str


_FS_ERRORS = frozenset({"OSError", "IOError", "FileNotFoundError", "FileExistsError", "NotADirectoryError"})
KNOWN_BUGS = (
    KnownBug(
        "torch.hub",
        re.compile(r"[/\\]torch[/\\]hub\.py$"),
        frozenset({"_get_cache_or_reload", "_load_local"}),
        _FS_ERRORS | {"ModuleNotFoundError", "ImportError", "BadZipFile", "Error"},
        "torch.hub.load run by several ranks at once on one hub directory (pytorch/pytorch #68320): each rank "
        "removes the shared zip and <owner>_<repo>_<ref>, extracts over the peers' extraction and moves its own "
        "there, so a rank imports hubconf.py from a directory a peer just removed, or shutil.move finds a peer's "
        "tree at the destination and moves its own into it. fsguard absorbs the duplicated removals, not the "
        "ordering: call torch.hub.load on one rank first (or torch.hub.download on one rank), barrier, then "
        "load on the others without force_reload; or give each rank its own TORCH_HOME.",
    ),
    KnownBug(
        "datasets",
        re.compile(r"[/\\]datasets[/\\](?:builder|arrow_reader|arrow_writer|table)\.py$"),
        frozenset({"download_and_prepare", "_download_and_prepare", "incomplete_dir", "as_dataset"}),
        _FS_ERRORS | {"ArrowInvalid", "ArrowIOError", "DatasetGenerationError"},
        "datasets built one cache entry from several nodes at once (transformers #30859): its FileLock did not "
        "lock across nodes (flock on NFS or Lustre with localflock: tox-dev/filelock #389), so the nodes wrote "
        "one <entry>.incomplete directory and moved or read it under each other: a shared writer, not a "
        "duplicated call. Prepare the dataset on one rank first (with training_args.main_process_first(): or "
        "a barrier), or put HF_DATASETS_CACHE on node-local disk, or mount the filesystem with working "
        "cross-node locks (Lustre -o flock).",
    ),
)


def known_bug(tb: Traceback) -> tuple[KnownBug, Frame] | None:
    """The known library bug a traceback ends in, and the library's innermost frame of it."""
    name = tb.exception.rsplit(".", 1)[-1]
    for bug in KNOWN_BUGS:
        if name not in bug.errors:
            continue
        frames = [f for f in tb.frames if bug.file.search(f.file)]
        if any(f.function in bug.functions for f in frames):
            return bug, frames[-1]
    return None
