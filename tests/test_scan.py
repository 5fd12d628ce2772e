"""``fsguard scan``: real processes on real torchrun logs (tests/data/audit), expected results written by hand."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
from itertools import zip_longest
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, clean_env

DATA = ROOT / "tests" / "data" / "audit"
UNGUARDED = DATA / "unguarded"


def fsguard(python: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(python), "-m", "fsguard", *args],
        check=False,
        env=clean_env({"TZ": "UTC"}),
        input=stdin,
        capture_output=True,
        timeout=60,
    )
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


def scan_json(python: Path, *args: str, stdin: bytes | None = None) -> tuple[int, dict[str, Any]]:
    done = fsguard(python, "scan", "--json", *args, stdin=stdin)
    return done.returncode, json.loads(done.stdout)


def findings(document: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (f["verdict"], f["op"], f["site_text"], f["error"]["type"], f["error"]["errno"], f["count"], f["ranks"])
        for f in document["findings"]
    ]


MAKEDIRS = (
    "absorbed",
    "makedirs",
    "/tmp/races/makedirs_race.py:5 in make_run_dir",
    "FileExistsError",
    "EEXIST",
    3,
    [1, 2, 3],
)

# One real torchrun log per race: what a person reading the log finds (rank 0 of most of them died of the
# gloo connection its crashed peers closed, which is not a filesystem error).
REAL = {
    "makedirs.log": [MAKEDIRS],
    "rename-record.log": [
        (
            "absorbed",
            "rename",
            "/tmp/races/rename_record_race.py:11 in save_checkpoint",
            "FileNotFoundError",
            "ENOENT",
            3,
            [0, 1, 2],
        )
    ],
    "replace.log": [
        (
            "absorbed",
            "replace",
            "/tmp/races/replace_race.py:9 in write_latest",
            "FileNotFoundError",
            "ENOENT",
            3,
            [1, 2, 3],
        )
    ],
    "rmtree.log": [
        (
            "absorbed",
            "rmtree",
            "/tmp/races/rmtree_race.py:6 in cleanup_staging",
            "FileNotFoundError",
            "ENOENT",
            3,
            [1, 2, 3],
        )
    ],
    "notempty.log": [
        ("serialize", "rename", "/tmp/races/notempty_race.py:11 in publish", "OSError", "ENOTEMPTY", 3, [0, 2, 3])
    ],
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_torchrun_logs(fsguard_python: Path, name: str) -> None:
    status, doc = scan_json(fsguard_python, str(UNGUARDED / name))
    assert status == 1
    assert findings(doc) == REAL[name]
    assert doc["problems"] == []


def test_details_of_a_finding(fsguard_python: Path) -> None:
    _, doc = scan_json(fsguard_python, str(UNGUARDED / "rename-record.log"))
    (finding,) = doc["findings"]
    assert finding["site"] == {"file": "/tmp/races/rename_record_race.py", "line": 11, "function": "save_checkpoint"}
    assert finding["hosts"] == ["localhost"]  # from torchrun's failure summary
    assert finding["paths"] == [
        {
            "pattern": "/tmp/races/w_rename_record/tmp-checkpoint-<n> -> /tmp/races/w_rename_record/checkpoint-<n>",
            "count": 3,
        }
    ]
    assert finding["error"]["message"] == (
        "[Errno 2] No such file or directory: '/tmp/races/w_rename_record/"
        "tmp-checkpoint-5' -> '/tmp/races/w_rename_record/checkpoint-5'"
    )
    assert finding["first_seen"] == {"source": str(UNGUARDED / "rename-record.log"), "line": 5}
    assert finding["why"].startswith("the source was gone because a peer already made the same move")


def test_summary_block_alone_gives_ranks_and_host(fsguard_python: Path, tmp_path: Path) -> None:
    """Only the agent's output (workers' own lines dropped): the @record summary still tells everything."""
    lines = (UNGUARDED / "rename-record.log").read_text().splitlines()
    (tmp_path / "agent.log").write_text("\n".join(line for line in lines if not line.startswith("[rank")) + "\n")
    status, doc = scan_json(fsguard_python, str(tmp_path / "agent.log"))
    assert status == 1
    assert findings(doc) == REAL["rename-record.log"]
    assert doc["findings"][0]["hosts"] == ["localhost"]


def test_genuine_errors_are_listed_but_status_is_0(fsguard_python: Path) -> None:
    status, doc = scan_json(fsguard_python, str(UNGUARDED / "genuine.log"))
    assert status == 0
    assert findings(doc) == [
        ("not fixable", "rename", "/tmp/races/genuine.py:10 in publish", "OSError", "EXDEV", 1, [1]),
        ("not fixable", "mkdir", "/tmp/races/genuine.py:5 in make_output", "FileNotFoundError", "ENOENT", 1, [0]),
    ]


def test_torchrun_log_dir_ranks_from_paths(fsguard_python: Path) -> None:
    status, doc = scan_json(fsguard_python, str(UNGUARDED / "tee-logdir"))
    assert status == 1
    assert findings(doc) == [
        (
            "absorbed",
            "makedirs",
            "/tmp/races/makedirs_race.py:5 in make_run_dir",
            "FileExistsError",
            "EEXIST",
            3,
            [0, 2, 3],
        )
    ]
    assert doc["inputs_read"] == 4


def _per_rank(path: Path) -> dict[int, list[str]]:
    ranks: dict[int, list[str]] = {}
    for line in path.read_text().splitlines():
        match = re.match(r"\[rank(\d+)\]: (.*)", line)
        if match:
            ranks.setdefault(int(match[1]), []).append(match[2])
    return ranks


@pytest.mark.parametrize("prefix", ["{r}: ", "  {r}: ", "[1,{r}]<stderr>:", "0: [rank{r}]: ", "[default{r}]:"])
def test_launcher_prefixes_interleaved_line_by_line(fsguard_python: Path, tmp_path: Path, prefix: str) -> None:
    ranks = _per_rank(UNGUARDED / "makedirs.log")
    mixed = [
        prefix.format(r=r) + line
        for row in zip_longest(*ranks.values())
        for r, line in zip(ranks, row, strict=False)
        if line is not None
    ]
    (tmp_path / "job.log").write_text("\n".join(mixed) + "\n")
    status, doc = scan_json(fsguard_python, str(tmp_path / "job.log"))
    assert status == 1
    assert findings(doc) == [MAKEDIRS]


def test_progress_bar_carriage_returns(fsguard_python: Path, tmp_path: Path) -> None:
    text = (UNGUARDED / "makedirs.log").read_text().replace("[rank2]: Traceback", "  3%|#  | 3/100\r[rank2]: Traceback")
    (tmp_path / "job.log").write_text(text)
    assert findings(scan_json(fsguard_python, str(tmp_path / "job.log"))[1]) == [MAKEDIRS]


def test_gzip_and_stdin(fsguard_python: Path, tmp_path: Path) -> None:
    packed = gzip.compress((UNGUARDED / "notempty.log").read_bytes())
    (tmp_path / "job.log.gz").write_bytes(packed)
    assert findings(scan_json(fsguard_python, str(tmp_path / "job.log.gz"))[1]) == REAL["notempty.log"]
    status, doc = scan_json(fsguard_python, "-", stdin=(UNGUARDED / "makedirs.log").read_bytes())
    assert (status, findings(doc), doc["findings"][0]["first_seen"]["source"]) == (1, [MAKEDIRS], "<stdin>")


def test_many_logs_human_table(fsguard_python: Path) -> None:
    done = fsguard(
        fsguard_python, "scan", *(str(UNGUARDED / name) for name in sorted(REAL)), str(UNGUARDED / "genuine.log")
    )
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[:5] == [
        "fsguard scan: 7 call sites with filesystem errors in 6 inputs: 4 absorbed by",
        "default, 1 need serialization, 2 not fixable",
        "",
        "   VERDICT      OP        ERROR                           N  RANKS       HOSTS",
        "!! serialize    rename    OSError ENOTEMPTY               3  0,2-3           ?",
    ]
    assert lines[5:10] == [
        "     at    /tmp/races/notempty_race.py:11 in publish",
        "     path  /tmp/races/w_notempty/tmp-rank<n> -> /tmp/races/w_notempty/published",
        lines[7],
        "     why   a directory was renamed onto a non-empty one: ranks interleaved",
        "           removing and renaming it; FSGUARD_SERIALIZE=1 runs those calls one",
    ]
    assert lines[7].startswith("     seen  ") and lines[7].endswith("/unguarded/notempty.log:5")
    assert "   absorbed     makedirs  FileExistsError EEXIST          3  1-3             ?" in lines
    assert "   not fixable  mkdir     FileNotFoundError ENOENT        1  0               ?" in lines
    assert lines[-2:] == [
        "absorbed: fsguard's default mode (FSGUARD=1) absorbs it; serialize: it needs",
        "FSGUARD=1 FSGUARD_SERIALIZE=1; not fixable: fsguard rightly re-raises it.",
    ]


def test_markdown(fsguard_python: Path) -> None:
    done = fsguard(fsguard_python, "scan", "--markdown", str(UNGUARDED / "makedirs.log"))
    assert done.returncode == 1
    assert done.stdout.splitlines()[:5] == [
        (
            "**fsguard scan**: 1 call site with filesystem errors in 1 input: 1 absorbed by default, 0 need "
            "serialization, 0 not fixable."
        ),
        "",
        "| Verdict | Op | Error | Call site | Paths | N | Ranks | Hosts | Why |",
        "|---|---|---|---|---|---|---|---|---|",
        (
            "| absorbed | makedirs | FileExistsError EEXIST | `/tmp/races/makedirs_race.py:5 in make_run_dir` | "
            "`w_makedirs/runs/exp<n>` | 3 | 1-3 |  | a peer created the directory first; the default mode treats it "
            "as done. |"
        ),
    ]


def test_nothing_found(fsguard_python: Path, tmp_path: Path) -> None:
    (tmp_path / "clean.log").write_text(
        "epoch 1 loss 0.5\nTraceback (most recent call last):\n"
        "  File \"train.py\", line 3, in <module>\nKeyError: 'lr'\n"
    )
    done = fsguard(fsguard_python, "scan", str(tmp_path / "clean.log"), str(DATA / "guarded" / "rename.log"))
    assert (done.returncode, done.stdout) == (0, "fsguard scan: no filesystem-race tracebacks in 2 inputs\n")


def test_truncated_binary_unreadable(fsguard_python: Path, tmp_path: Path) -> None:
    text = (UNGUARDED / "rmtree.log").read_text()
    cut = tmp_path / "cut.log"  # killed while rank 2 printed its traceback
    cut.write_text(text[: text.index("[rank2]:   File")])
    binary = tmp_path / "core"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00" * 100)
    dangling = tmp_path / "gone.log"
    dangling.symlink_to(tmp_path / "nowhere")
    done = fsguard(
        fsguard_python, "scan", "--json", str(cut), str(binary), str(dangling), str(UNGUARDED / "makedirs.log")
    )
    assert done.returncode == 2
    doc = json.loads(done.stdout)
    assert [(p["source"], p["message"]) for p in doc["problems"]] == [
        (str(cut), "ends inside a traceback that starts at line 34 (truncated?)"),
        (str(binary), "binary file (NUL bytes in its first block), skipped"),
        (str(dangling), "cannot read: dangling symbolic link"),
    ]
    assert f"fsguard scan: {cut}: ends inside a traceback" in done.stderr
    assert findings(doc) == [
        MAKEDIRS,
        (
            "absorbed",
            "rmtree",
            "/tmp/races/rmtree_race.py:6 in cleanup_staging",
            "FileNotFoundError",
            "ENOENT",
            2,
            [1, 3],
        ),
    ]


def test_usage_error(fsguard_python: Path) -> None:
    assert fsguard(fsguard_python, "scan").returncode == 2


@pytest.mark.parametrize(
    ("op", "errno_name", "expected"),
    [
        ("makedirs", "EEXIST", "absorbed"),
        ("rename", "ENOENT", "absorbed"),
        ("replace", "ENOENT", "absorbed"),
        ("move", "ENOENT", "absorbed"),
        ("rmtree", "ENOENT", "absorbed"),
        ("rmtree", "EBUSY", "absorbed"),
        ("rename", "ENOTEMPTY", "serialize"),
        ("replace", "EEXIST", "serialize"),
        ("rmtree", "ENOTEMPTY", "serialize"),
        ("makedirs", "ESTALE", "serialize"),
        ("mkdir", "EEXIST", "absorbed"),
        ("remove", "ENOENT", "absorbed"),
        ("symlink", "EEXIST", "absorbed"),
        ("link", "EEXIST", "absorbed"),
        ("remove", "EISDIR", "not fixable"),
        ("remove", "EACCES", "not fixable"),
        ("symlink", "ENOENT", "not fixable"),
        ("link", "ENOENT", "not fixable"),
        ("makedirs", "ENOENT", "not fixable"),
        ("mkdir", "ENOENT", "not fixable"),
        ("makedirs", "EACCES", "not fixable"),
        ("rename", "EXDEV", "not fixable"),
        ("rename", "EBUSY", "not fixable"),
        ("rmtree", "ENOTDIR", "not fixable"),
        ("rename", "EISDIR", "not fixable"),
    ],
)
def test_verdict_rules(op: str, errno_name: str, expected: str) -> None:
    from fsguard.cli.scan import verdict

    decided, why = verdict(op, errno_name)
    assert decided == expected
    assert why.endswith(".") and why.count(". ") == 0  # one sentence


FAMILY_SCRIPT = """
import os, pathlib, sys, tempfile
d = tempfile.mkdtemp()
which = sys.argv[1]
open(os.path.join(d, "last"), "w").close()
os.symlink("one", os.path.join(d, "latest"))
os.link(os.path.join(d, "last"), os.path.join(d, "best"))
if which == "remove":
    os.remove(os.path.join(d, "old-checkpoint"))
elif which == "unlink":
    pathlib.Path(d, "old.log").unlink()
elif which == "mkdir":
    pathlib.Path(d).mkdir(parents=True)
elif which == "symlink":
    pathlib.Path(d, "latest").symlink_to("one")
elif which == "link":
    os.link(os.path.join(d, "last"), os.path.join(d, "best"))
"""


@pytest.mark.parametrize(
    ("which", "op", "error"),
    [
        ("remove", "remove", "FileNotFoundError"),
        ("unlink", "remove", "FileNotFoundError"),
        ("mkdir", "mkdir", "FileExistsError"),
        ("symlink", "symlink", "FileExistsError"),
        ("link", "link", "FileExistsError"),
    ],
)
def test_scan_recognises_remove_mkdir_symlink_link(
    fsguard_python: Path, tmp_path: Path, which: str, op: str, error: str
) -> None:
    """Real tracebacks of the newer guarded operations (and their pathlib forms), without fsguard."""
    script = tmp_path / "housekeeping.py"
    script.write_text(FAMILY_SCRIPT)
    done = subprocess.run([str(fsguard_python), str(script), which], env=clean_env(), capture_output=True, text=True)
    assert done.returncode == 1 and error in done.stderr
    log = tmp_path / "rank.log"
    log.write_text(done.stderr)
    code, document = scan_json(fsguard_python, str(log))
    assert code == 1
    (finding,) = document["findings"]
    assert (finding["verdict"], finding["op"], finding["error"]["type"]) == ("absorbed", op, error)
    assert finding["site_text"].startswith(f"{script}:")
