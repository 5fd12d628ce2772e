"""The bad-input table's runner: every row of a group in this interpreter, fsguard forced on or off.

``tests/test_parity.py`` runs this script as::

    python parity_cases.py prepare GROUP BASE [SHM]   # "stale" only: what must exist before the interpreter
    python parity_cases.py run GROUP BASE [SHM]       # every row of GROUP; one JSON object on stdout

The rows are in ``parity_makedirs.py``, ``parity_rename.py``, ``parity_kinds.py``, ``parity_rmtree.py`` and
``parity_params.py`` (their vocabulary in ``parity_table.py``; a new table module is added to ``TABLES``). Each
row works in its own directory ``BASE/<row>`` (and ``SHM/<row>`` on tmpfs, for EXDEV).

Before each row the worker writes ``parity-row: <name>`` on stderr, so the test can tell which row wrote
which ``fsguard:`` record line. The JSON holds ``meta`` and, per row: ``ok``, ``result`` or ``exc`` (type,
errno, strerror, filename(2) and their types, args, str, context, cause, worker frames, failing source
line), ``calls`` (onerror/onexc calls in order), ``warnings`` (category, message, raised at the worker's line), ``state`` (the row directory's tree afterwards),
``records`` (the lines fsguard wrote to ``FSGUARD_LOG`` during the row, when set), or ``skip`` with a reason. Paths are shown with the run's own roots replaced by ``<base>`` and ``<shm>``.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import stat
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # the table modules, whether this runs as a script or is imported by the tests
    sys.path.insert(0, HERE)

import parity_table as table  # noqa: E402
from gate import crash_of  # noqa: E402 - the tests' one thread helper
from parity_table import CALL_MARK, HAS_ONEXC, NOBODY, ROWS, Row, Skip  # noqa: E402,F401 - the tests read these here

TABLES = ("parity_makedirs", "parity_rename", "parity_kinds", "parity_rmtree", "parity_params")
for _name in TABLES:
    __import__(_name)  # registers its rows in ROWS
table.handled_rows(ROWS)  # each absorbed row again, under the program's own handler
# file -> lines, read now (after dropping to nobody they may be out of reach): the runner's and every table's
SOURCES: dict[str, list[str]] = {}
for _file in sorted(glob.glob(os.path.join(HERE, "parity_*.py"))):
    with open(_file) as _source:
        SOURCES[_file] = _source.read().splitlines()

# Everything a table module uses, here too (table modules of other branches may import it from here).
from parity_table import (  # noqa: E402,F401
    HAS_RMTREE_DIR_FD,
    KINDS,
    Calls,
    PathLikeArg,
    j,
    mkdir,
    needs_rmtree_dir_fd,
    onerror,
    onexc,
    row,
    show,
    touch,
)


def describe(exc: BaseException, act: Callable[..., Any]) -> dict[str, Any]:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in SOURCES]
    # The line where the exception left the row's own function: the call under test, if all is well.
    last = next((f for f in reversed(frames) if f.name == act.__name__), None)
    return {
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "errno": getattr(exc, "errno", None),
        "strerror": getattr(exc, "strerror", None),
        "filename": show(getattr(exc, "filename", None)),
        "filename_type": type(getattr(exc, "filename", None)).__name__,
        "filename2": show(getattr(exc, "filename2", None)),
        "filename2_type": type(getattr(exc, "filename2", None)).__name__,
        "args": show(exc.args),
        "str": show(str(exc)),
        "context": None if exc.__context__ is None else type(exc.__context__).__name__,
        "cause": None if exc.__cause__ is None else type(exc.__cause__).__name__,
        "suppress_context": exc.__suppress_context__,
        "worker_frames": [[f.name, f.lineno] for f in frames],
        "failing_line": SOURCES[last.filename][last.lineno - 1].strip() if last and last.lineno else None,
    }


def xattrs(path: str) -> list[str]:
    """The extended attributes' names on ``path`` itself (none where the filesystem keeps none)."""
    try:
        return sorted(os.listxattr(path, follow_symlinks=False))
    except OSError as error:
        return [f"<listxattr: {error.strerror}>"]


def snapshot(d: str) -> list[list[Any]]:
    """The tree under ``d``: relative path, kind, permission bits, file text or link target, and the extended
    attributes of ``d`` and of each entry (no trace: fsguard leaves none on a user's files)."""
    found: list[list[Any]] = [[".", "xattrs", xattrs(d)]]
    for top, dirs, files in os.walk(d, onerror=lambda e: found.append(["<walk error>", show(e)])):
        dirs.sort()
        for name in sorted(dirs + files):
            path = j(top, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, d)
            mode = oct(stat.S_IMODE(st.st_mode))
            found.append([rel, "xattrs", xattrs(path)])
            if stat.S_ISLNK(st.st_mode):
                found.append([rel, "link", show(os.readlink(path))])
            elif stat.S_ISDIR(st.st_mode):
                found.append([rel, "dir", mode, st.st_uid])
            else:
                try:
                    with open(path) as f:
                        text: str | None = f.read()
                except OSError as error:
                    text = f"<unreadable: {error.strerror}>"
                found.append([rel, "file", mode, st.st_uid, text])
    return found


def drop_to_nobody() -> None:
    assert NOBODY is not None
    __import__("logging")  # fsguard imports it to write a record: the standard library may be root's alone
    if hasattr(os.makedirs, "__wrapped__"):  # fsguard's rules load at the first failure: this venv is root's alone
        __import__("fsguard.failure", fromlist=["load_policy"]).load_policy()
    os.setgroups([])
    os.setgid(NOBODY.pw_gid)
    os.setuid(NOBODY.pw_uid)


def in_a_thread(act: Callable[..., Any], *args: Any) -> Any:
    """``act(*args)`` in a thread of its own, with no handler around it: a race there is a would-be crash, which
    fsguard may absorb (a handler around the call would decide instead); what escaped it is raised again here,
    after fsguard decided."""
    result, escaped = crash_of(act, *args)
    if escaped is not None:
        raise escaped
    return result


LOGGED: list[str] = []  # the FSGUARD_LOG lines already given to a row


def logged() -> list[str]:
    """The record lines fsguard wrote to ``FSGUARD_LOG`` since the last call: the row's records, every one (its
    stderr lines are rate-limited per call site, and a held-back line comes out with a later row)."""
    where = os.environ.get("FSGUARD_LOG", "")
    lines: list[str] = []
    for path in sorted(glob.glob(os.path.join(where, "*.jsonl"))) if where else []:
        with open(path) as log:
            lines.extend(line for line in log.read().splitlines() if line.strip())
    new = lines[len(LOGGED) :]
    LOGGED.extend(new)
    return new


def run_row(item: Row, d: str) -> dict[str, Any]:
    calls: Calls = []
    cwd = os.getcwd()
    sys.stderr.write(f"parity-row: {item.name}\n")
    sys.stderr.flush()
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        try:
            outcome: dict[str, Any] = {"ok": True, "result": show(in_a_thread(item.act, d, calls))}
        except Skip as reason:
            return {"skip": str(reason)}
        except Exception as exc:
            outcome = {"ok": False, "exc": describe(exc, item.act)}
        finally:
            os.chdir(cwd)
    sys.stderr.flush()
    outcome["warnings"] = [[w.category.__name__, show(str(w.message)), w.filename in SOURCES] for w in warned]
    outcome["calls"] = calls
    outcome["state"] = snapshot(d)
    outcome["records"] = logged()
    return outcome


def main(argv: list[str]) -> int:
    command, group, base = argv[0], argv[1], argv[2]
    table.BASE, table.SHM = base, argv[3] if len(argv) > 3 else ""
    rows = [r for r in ROWS.values() if r.group == group]
    if command == "prepare":
        for item in rows:
            os.mkdir(j(base, item.name))
            if item.prepare is not None:
                item.prepare(j(base, item.name))
        return 0
    if group != "stale":  # stale rows were prepared by an earlier process
        for item in rows:
            os.mkdir(j(base, item.name))
            if item.prepare is not None:
                item.prepare(j(base, item.name))
    if group == "nobody":
        drop_to_nobody()
    functions = {"makedirs": os.makedirs, "rename": os.rename, "replace": os.replace, "rmtree": shutil.rmtree}
    meta = {
        "patched": sorted(op for op, f in functions.items() if hasattr(f, "__wrapped__")),
        "uid": os.getuid(),
        "python": list(sys.version_info[:3]),
        "onexc": HAS_ONEXC,
    }
    results = {item.name: run_row(item, j(base, item.name)) for item in rows}
    sys.stdout.write(json.dumps({"meta": meta, "rows": results}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
