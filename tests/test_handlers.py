"""A program that handles a guarded call's error itself gets it; only a would-be crash is absorbed.

Every row of ``tests/workers/parity_handlers.py`` (a race fsguard's evidence would absorb, inside one kind of
handler) runs in a fresh interpreter of the wheel with ``FSGUARD=force`` and with ``FSGUARD=0``:

* ``deferred`` rows (``except`` of the class, a base class, a tuple, bare ``except``, ``contextlib.suppress``,
  a specific handler one or two frames above, a broad one that swallows it further up, ``shutil.move`` in a
  handler): the outcome is the standard
  library's (the same handler ran with the same exception: type, errno, file names, message, context, the
  row's frames; the same files), and one ``deferred`` record names the handler and its line;
* ``absorbed`` rows, each a would-be crash (a ``with`` block of a lock or an open file, ``try/finally``, a clause of another class, a handler of another statement, ``makedirs(exist_ok=True)`` whose stale
  lookup a handler waits on): the standard library raises, fsguard absorbs with one ``absorbed`` record.

``tests/test_versions.py`` runs the same rows under the other CPython versions found (3.10 from the source's
``ast``, 3.12 and 3.13 from their bytecode).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fsguard.records import parse_line
from tests.conftest import TORCHRUN_ENV, clean_env
from tests.parity_support import by_row
from tests.workers import parity_handlers as rows

WORKER = Path(rows.__file__).resolve()
MARKER = "handler-row: "
Outcomes = dict[str, dict[str, Any]]


def collect(python: Path, root: Path) -> Outcomes:
    """{mode: {"meta": ..., "rows": {row: outcome}, "stderr": {row: [lines]}}} for force and off."""
    found: Outcomes = {}
    for mode, value in (("force", "force"), ("off", "0")):
        base = root / mode
        base.mkdir(parents=True)
        env = {**TORCHRUN_ENV, "FSGUARD": value, "FSGUARD_SETTLE_S": "0.2"}
        done = subprocess.run(
            [str(python), str(WORKER), str(base)], env=clean_env(env), capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        result["stderr"] = by_row(done.stderr, MARKER)
        found[mode] = result
    assert found["force"]["meta"]["patched"] and not found["off"]["meta"]["patched"]
    assert found["force"]["stderr"]["<before any row>"] == found["off"]["stderr"]["<before any row>"] == []
    return found


def check_row(outcomes: Outcomes, name: str) -> None:
    expect, handler = rows.EXPECT[name]
    force, off = outcomes["force"]["rows"][name], outcomes["off"]["rows"][name]
    assert outcomes["off"]["stderr"][name] == []
    lines = outcomes["force"]["stderr"][name]
    assert all(line.startswith("fsguard: ") for line in lines), lines
    records = [parse_line(line) for line in lines]
    # The scenario is a race the standard library fails on: the handler (or the row) got the error.
    assert off.get("error") or off.get("escaped") or off["handled"] in ("suppress", "assertRaises"), off
    if expect == "deferred":
        assert force == off, json.dumps({"force": force, "off": off}, indent=1)
        assert off["handled"], off
        (record,) = records
        assert record is not None and record.decision == "deferred", lines
        assert record.detail["handler"] == handler, record.detail
        frame_file, _, frame_line = record.detail["frame"].rpartition(":")
        if "callable" in name:  # the caller is unittest's own frame (of the version that ran the rows)
            assert frame_file.endswith(os.path.join("unittest", "case.py")), record.detail
        else:
            assert frame_file == str(WORKER), record.detail
        assert frame_line.isdigit(), record.detail
        assert record.evidence  # what would have absorbed it
    else:
        assert force["ok"] and force["handled"] is None and not force.get("escaped"), force
        # absorbed; a rename of a file a peer renamed first is absorbed as a hazard (one temp name shared by ranks,
        # their writes may be mixed: tests/test_real_shared_names.py), which the handler rows do not change
        (record,) = records
        assert record is not None and record.decision in ("absorbed", "hazard"), lines
        assert record.decision == "absorbed" or record.detail.get("shared_source") == "file", lines


@pytest.fixture(scope="module")
def outcomes(fsguard_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
    return collect(fsguard_python, tmp_path_factory.mktemp("handlers"))


@pytest.mark.parametrize("name", list(rows.ROWS))
def test_handler_row(outcomes: Outcomes, name: str) -> None:
    check_row(outcomes, name)


CLAIM_LOOP = """
    import os, posix, tempfile
    root = tempfile.mkdtemp()
    posix.mkdir(os.path.join(root, "run-0"))  # a peer's, moments ago (the unguarded call: not this rank's own)
    i = 0
    while True:
        try:
            os.makedirs(os.path.join(root, f"run-{i}"))
            break
        except FileExistsError:
            i += 1
    print(i)
"""


def test_report_groups_deferred_records_and_status_is_unchanged(fsguard_python: Path, tmp_path: Path) -> None:
    """A deferred record reads back with the one parser, ``fsguard report`` groups it like the others, and
    ``fsguard status`` is the same as before (no new setting)."""
    from tests.conftest import run_python
    from tests.test_report import fsguard, report_json

    logs = tmp_path / "logs"
    done = run_python(fsguard_python, CLAIM_LOOP, {**TORCHRUN_ENV, "FSGUARD": "1", "FSGUARD_LOG": str(logs)})
    assert done.returncode == 0 and done.stdout.split() == ["1"], done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("fsguard: deferred makedirs rank=1/4 "), line
    record = parse_line(line)
    assert record is not None and record.detail["handler"] == "except FileExistsError"
    assert record.site is not None and record.site["file"] == "<string>"
    status, doc, err = report_json(fsguard_python, str(logs))
    assert status == 1, err
    (group,) = doc["groups"]
    assert (group["decision"], group["op"], group["count"], group["attention"]) == ("deferred", "makedirs", 1, False)
    table = fsguard(fsguard_python, "report", str(logs))
    assert "deferred" in table.stdout, table.stdout
    assert "deferred" not in fsguard(fsguard_python, "status").stdout


HANDLED_RENAMES = """
    import json, os, sys
    os.chdir(sys.argv[1])
    os.mkdir("d")
    with open("d/final", "w") as f:  # a peer's move of the shared temp name landed moments ago
        f.write("peer")
    outcomes = []
    for src, dst in (("d/lock", "d/lock.mine"), ("d/tmp", "d/final")):
        try:
            os.replace(src, dst) if dst == "d/final" else os.rename(src, dst)
            outcomes.append("ok")
        except FileNotFoundError as error:  # the program's own answer: "not mine", "already published"
            outcomes.append(f"{type(error).__name__}:{error.errno}:{error.filename}:{error.filename2}")
    print(json.dumps(outcomes))
"""


def test_a_handled_rename_gets_its_error_without_the_settle_wait(fsguard_python: Path, tmp_path: Path) -> None:
    """A rename whose source never existed waits up to ``FSGUARD_SETTLE_S`` for a destination a peer might have
    made; when the calling code handles the error (an ``os.rename(lock, mine)`` lock's failed try), that wait
    would only delay its handler. With a 600 s budget the program still ends at once, as without fsguard; the
    peer's move that fsguard would have absorbed is recorded as ``deferred``."""
    runs = {}
    for value in ("0", "1"):
        where = tmp_path / value
        where.mkdir()
        env = {**TORCHRUN_ENV, "FSGUARD": value, "FSGUARD_SETTLE_S": "600", "FSGUARD_LOG": str(tmp_path / "log")}
        done = subprocess.run(
            [str(fsguard_python), "-c", textwrap.dedent(HANDLED_RENAMES), str(where)],
            env=clean_env(env),
            capture_output=True,
            text=True,
            timeout=60,  # the old code waited the whole 600 s budget here
        )
        assert done.returncode == 0, done.stderr
        runs[value] = (json.loads(done.stdout), done.stderr)
    assert (
        runs["1"][0]
        == runs["0"][0]
        == [
            "FileNotFoundError:2:d/lock:d/lock.mine",
            "FileNotFoundError:2:d/tmp:d/final",
        ]
    )
    found = [parse_line(line) for line in runs["1"][1].splitlines() if line.startswith("fsguard: ")]
    assert [(r.op, r.decision) for r in found if r] == [("replace", "deferred")], runs["1"][1]
    assert all(r.waited_s < 1.0 for r in found if r), runs["1"][1]  # decided at once, not after 600 s
