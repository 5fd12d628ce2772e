"""``fsguard report``: real processes on real logs (tests/data/audit), expected results written by hand."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, clean_env
from tests.support.cli import run_cli
from tests.support.env import TORCHRUN_ENV

DATA = ROOT / "tests" / "data" / "audit"
GUARDED = DATA / "guarded"
SYNTHETIC = DATA / "synthetic" / "records.jsonl"


def fsguard(python: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(python, *args, env={"TZ": "UTC"}, stdin=stdin)


def report_json(python: Path, *args: str, stdin: bytes | None = None) -> tuple[int, dict[str, Any], str]:
    done = fsguard(python, "report", "--json", *args, stdin=stdin)
    return done.returncode, json.loads(done.stdout), done.stderr


def summary(document: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(g["decision"], g["op"], g["site_text"], g["count"], g["ranks"], g["hosts"]) for g in document["groups"]]


def test_guarded_job_logs(fsguard_python: Path) -> None:
    status, doc, err = report_json(
        fsguard_python, str(GUARDED / "rename.log"), str(GUARDED / "notempty.log"), str(GUARDED / "rmtree.log")
    )
    assert status == 1, err
    assert summary(doc) == [
        ("conflict", "rename", "/tmp/races/notempty_race.py:11 in publish", 3, [0, 1, 2], ["vm"]),
        ("absorbed", "rmtree", "/tmp/races/rmtree_race.py:6 in cleanup_staging", 4, [0, 1, 2, 3], ["vm"]),
        ("absorbed", "rename", "/tmp/races/rename_race.py:11 in save_checkpoint", 3, [0, 1, 3], ["vm"]),
    ]
    conflict = doc["groups"][0]
    assert conflict["attention"] is True and conflict["decisions"] == {"conflict": 3}
    assert conflict["paths"] == [
        {"pattern": "/tmp/races/g_notempty/tmp-rank<n> -> /tmp/races/g_notempty/published", "count": 3}
    ]
    assert conflict["site"] == {"file": "/tmp/races/notempty_race.py", "line": 11, "function": "publish"}
    assert doc["records"] == 10 and doc["inputs_read"] == 3 and doc["problems"] == []
    assert doc["groups"][1]["attention"] is False


def test_jsonl_directory_and_the_same_jobs_log_count_once(fsguard_python: Path) -> None:
    status, doc, _ = report_json(fsguard_python, str(GUARDED / "rmtree-jsonl"), str(GUARDED / "rmtree.log"))
    assert status == 1
    assert doc["records"] == 4 and doc["duplicates"] == 4 and doc["inputs_read"] == 5
    (group,) = doc["groups"]
    assert group["ranks"] == [0, 1, 2, 3] and group["paths"] == [{"pattern": "/tmp/races/g_rmtree/staging", "count": 4}]


def test_json_schema(fsguard_python: Path) -> None:
    status, doc, _ = report_json(fsguard_python, str(SYNTHETIC))
    assert status == 1
    assert set(doc) == {
        "command",
        "version",
        "inputs_read",
        "records",
        "duplicates",
        "groups",
        "problems",
        "exit_status",
    }
    assert doc["command"] == "report" and doc["exit_status"] == 1
    hazard, mixed, renames = doc["groups"]
    assert hazard == {
        "op": "rmtree",
        "site": {"file": "/job/train.py", "line": 140, "function": "cleanup"},
        "site_text": "/job/train.py:140 in cleanup",
        "attention": True,
        "decision": "hazard",
        "decisions": {"hazard": 1, "absorbed": 1},
        "count": 2,
        "ranks": [0, 12],
        "hosts": ["n1", "n2"],
        "paths": [{"pattern": "/ckpt/staging-<n>", "count": 2}],
        "other_paths": 0,
        "longest_wait_s": 0.0,
        "total_wait_s": 0.0,
        "first": "2026-11-30T01:03:24+0000",
        "last": "2026-11-30T01:03:25+0000",
        "first_epoch": 1796000604.5,
        "last_epoch": 1796000605.0,
        "evidence": "a peer renamed the tree while this rank removed it: 3 entries missing from /ckpt/checkpoint-50",
        "deferred_by": [],
    }
    assert (mixed["decision"], mixed["decisions"], mixed["longest_wait_s"]) == (
        "unserialized",
        {"unserialized": 1, "waited": 1},
        30.0,
    )
    assert (renames["count"], renames["ranks"], renames["longest_wait_s"]) == (6, [1, 9, 10], 1.25)
    # what a call site paid in all: its row says so where more than its longest wait adds up to a second or more
    assert (mixed["total_wait_s"], renames["total_wait_s"]) == (32.5, 1.25)
    assert renames["paths"] == [{"pattern": "/ckpt/tmp-checkpoint-<n> -> /ckpt/checkpoint-<n>", "count": 6}]
    assert (renames["first"], renames["last"]) == ("2026-11-30T00:53:20+0000", "2026-11-30T01:03:20+0000")


EXPECTED_HUMAN = """\
fsguard report: 10 records at 3 call sites in 1 input; 1 with hazards or
conflicts (!!)
from 2026-11-30 00:53:20 to 2026-11-30 01:03:25 (local time)

!! DATA MAY HAVE BEEN LOST: hazards and conflicts at 1 call site
   DECISION      OP            N  RANKS       HOSTS     WAIT  FIRST     LAST
!! hazard        rmtree        2  0,12            2    0.00s  01:03:24  01:03:25
     at    /job/train.py:140 in cleanup
     path  /ckpt/staging-<n>
     mix   1 hazard, 1 absorbed
     hosts n1, n2
     why   a peer renamed the tree while this rank removed it: 3 entries missing
           from /ckpt/checkpoint-50

OTHER RECORDS: 2 call sites
   DECISION      OP            N  RANKS       HOSTS     WAIT  FIRST     LAST
   unserialized  makedirs      2  3-4             1   30.00s  00:53:21  00:53:22
     at    /job/util.py:7 in ensure_dir
     path  /ckpt/logs/rank<n>
     mix   1 unserialized, 1 waited
     hosts n1
     why   lock timed out after 30 s: ran unserialized
     waits 32.50 s in all, over 2 records
   absorbed      rename        6  1,9-10          2    1.25s  00:53:20  01:03:20
     at    /job/train.py:120 in save
     path  /ckpt/tmp-checkpoint-<n> -> /ckpt/checkpoint-<n>
     hosts n1, n2
     why   source gone, destination present and changed 0.01 s ago: a peer did
           the same move
"""


def test_human_table(fsguard_python: Path) -> None:
    done = fsguard(fsguard_python, "report", str(SYNTHETIC))
    assert done.returncode == 1
    assert done.stdout == EXPECTED_HUMAN


def test_human_table_fits_80_columns(fsguard_python: Path) -> None:
    done = fsguard(fsguard_python, "report", str(GUARDED))
    assert done.returncode == 1
    assert done.stdout.startswith(
        "fsguard report: 13 records at 4 call sites in 10 inputs; 1 with hazards or\n"
        "conflicts (!!); 4 duplicates ignored\n"
    )
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    # what was at risk first, under its own heading; the rest after
    assert done.stdout.index("!! DATA MAY HAVE BEEN LOST: hazards and conflicts at 1 call site\n") < (
        done.stdout.index("!! conflict ")
    )
    assert re.search(r"^!! conflict +rename +3 +0-2 ", done.stdout, re.MULTILINE)
    assert done.stdout.index("!! conflict ") < done.stdout.index("\nOTHER RECORDS: 3 call sites\n")
    # long paths are cut in the middle: their first component and their whole last one stay
    assert "     path  /tmp/.../tmp-checkpoint-<n> -> /tmp/.../checkpoint-<n>\n" in done.stdout
    wide = fsguard(fsguard_python, "report", "--wide", str(GUARDED))
    assert "     path  /tmp/races/g_rename/tmp-checkpoint-<n> -> /tmp/races/g_rename/checkpoint-<n>\n" in wide.stdout


def test_markdown(fsguard_python: Path) -> None:
    done = fsguard(fsguard_python, "report", "--markdown", str(SYNTHETIC))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0] == "**fsguard report**: 10 records at 3 call sites in 1 input; 1 with hazards or conflicts (!!)."
    assert lines[2] == "**⚠️ DATA MAY HAVE BEEN LOST: hazards and conflicts** at 1 call site:"
    header = "|  | Decision | Op | Call site | Paths | N | Ranks | Hosts | Longest wait | First | Last | Evidence |"
    assert lines[4] == lines[10] == header
    assert lines[5] == lines[11] == "|---|---|---|---|---|---|---|---|---|---|---|---|"
    assert lines[8] == "**Other records**: 2 call sites"
    assert lines[6] == (
        "| ⚠️ | **1 hazard, 1 absorbed** | rmtree | `/job/train.py:140 in cleanup` | `/ckpt/staging-<n>` "
        "| 2 | 0,12 | n1, n2 | 0.00 s | 2026-11-30 01:03:24 | 2026-11-30 01:03:25 | a peer renamed "
        "the tree while this rank removed it: 3 entries missing from /ckpt/checkpoint-50 |"
    )
    assert lines[12].startswith("|  | 1 unserialized, 1 waited | makedirs |")
    assert len(lines) == 14


@pytest.mark.parametrize("prefix", ["[rank{r}]: ", "{r}: ", "  {r}: ", "[1,{r}]<stderr>:", "0: [rank{r}]: "])
def test_launcher_prefixes(fsguard_python: Path, tmp_path: Path, prefix: str) -> None:
    lines = (GUARDED / "rename.log").read_text().splitlines()
    prefixed = [prefix.format(r=n % 4) + line for n, line in enumerate(lines)]
    (tmp_path / "job.log").write_text("\n".join(prefixed) + "\n")
    status, doc, _ = report_json(fsguard_python, str(tmp_path / "job.log"))
    assert status == 1
    assert summary(doc) == [
        ("absorbed", "rename", "/tmp/races/rename_race.py:11 in save_checkpoint", 3, [0, 1, 3], ["vm"])
    ]


def test_gzip_and_stdin(fsguard_python: Path, tmp_path: Path) -> None:
    packed = gzip.compress(SYNTHETIC.read_bytes())
    (tmp_path / "records.jsonl.gz").write_bytes(packed)
    status, doc, _ = report_json(fsguard_python, str(tmp_path / "records.jsonl.gz"))
    assert (status, doc["records"], len(doc["groups"])) == (1, 10, 3)
    status, doc, _ = report_json(fsguard_python, "-", stdin=packed)  # compressed stdin too
    assert (status, doc["records"]) == (1, 10)
    status, doc, _ = report_json(fsguard_python, "-", stdin=(GUARDED / "notempty.log").read_bytes())
    assert (status, doc["records"], doc["groups"][0]["decision"]) == (1, 3, "conflict")


def test_nothing_found_is_status_0(fsguard_python: Path) -> None:
    done = fsguard(fsguard_python, "report", str(DATA / "unguarded" / "makedirs.log"))
    assert (done.returncode, done.stdout, done.stderr) == (0, "fsguard report: no fsguard records in 1 input\n", "")


def test_truncated_inputs_are_named_and_the_rest_is_read(fsguard_python: Path, tmp_path: Path) -> None:
    text = SYNTHETIC.read_bytes()
    cut_jsonl = tmp_path / "cut.jsonl"
    cut_jsonl.write_bytes(text[: len(text) - 40])  # the 10th record loses its end
    cut_gz = tmp_path / "cut.log.gz"
    filler = "".join(f"step {i} {hashlib.sha256(str(i).encode()).hexdigest()}\n" for i in range(100)).encode()
    cut_gz.write_bytes(gzip.compress((GUARDED / "rename.log").read_bytes() + filler)[:-30])
    done = fsguard(fsguard_python, "report", "--json", str(cut_jsonl), str(cut_gz), str(GUARDED / "notempty.log"))
    assert done.returncode == 2
    doc = json.loads(done.stdout)
    assert doc["problems"] == [
        {"source": str(cut_jsonl), "message": "line 10: damaged or truncated fsguard record, skipped", "error": True},
        {
            "source": str(cut_gz),
            "message": "truncated: the compressed stream ends early; what came before was read",
            "error": True,
        },
    ]
    assert f"fsguard report: {cut_jsonl}: line 10: damaged or truncated fsguard record, skipped" in done.stderr
    # 9 synthetic records, the renames decompressed before the cut, the 3 conflicts
    assert doc["records"] == 9 + 3 + 3 and doc["exit_status"] == 2


def test_binary_and_unreadable_inputs(fsguard_python: Path, tmp_path: Path) -> None:
    binary = tmp_path / "model.pt"
    binary.write_bytes(b"PK\x03\x04\x00\x00" + bytes(range(256)) * 10)
    dangling = tmp_path / "gone.log"
    dangling.symlink_to(tmp_path / "nowhere")
    done = fsguard(
        fsguard_python, "report", "--json", str(binary), str(dangling), str(tmp_path / "missing.log"), str(SYNTHETIC)
    )
    assert done.returncode == 2
    doc = json.loads(done.stdout)
    assert [(p["source"], p["message"]) for p in doc["problems"]] == [
        (str(binary), "binary file (NUL bytes in its first block), skipped"),
        (str(dangling), "cannot read: dangling symbolic link"),
        (str(tmp_path / "missing.log"), "cannot read: No such file or directory"),
    ]
    assert doc["records"] == 10
    # found while walking a directory, a binary file is only noted
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "model.pt").write_bytes(binary.read_bytes())
    (tmp_path / "dir" / "records.jsonl").write_bytes(SYNTHETIC.read_bytes())
    done = fsguard(fsguard_python, "report", str(tmp_path / "dir"))
    assert done.returncode == 1
    assert f"fsguard report: note: {tmp_path / 'dir' / 'model.pt'}: binary file" in done.stderr


def test_usage_error(fsguard_python: Path) -> None:
    assert fsguard(fsguard_python, "report").returncode == 2
    assert fsguard(fsguard_python, "report", "--json", "--markdown", str(SYNTHETIC)).returncode == 2


def test_bench_audit_quick_runs(tmp_path: Path) -> None:
    """bench/audit.py keeps working (no timing assertions): both commands find the planted races."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "audit.py"), "--quick", "--json", str(tmp_path / "a.json")],
        check=False,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    runs = json.loads((tmp_path / "a.json").read_text())["audit"]["runs"]
    assert {name: r["found"] for name, r in runs.items()} == {
        "report/16": 0,
        "scan/16": 0,
        "report/64": 1,
        "scan/64": 1,
    }
    assert all(r["exit"] == (1 if r["found"] else 0) for r in runs.values())
    html = json.loads((tmp_path / "a.json").read_text())["audit"]["html"]
    assert {name: (r["exit"], r["found"]) for name, r in html.items()} == {
        "html/1": (1, (1 << 20) // 473),
        "html/4": (1, 4 * (1 << 20) // 473),
        "html-1file/4": (1, 4 * (1 << 20) // 473),
    }


DEFERRED = """
import os, sys
import fsguard.patching

where = sys.argv[1]
src, dst = os.path.join(where, "tmp-checkpoint-1"), os.path.join(where, "checkpoint-1")
os.mkdir(src)
fsguard.patching.original("rename")(src, dst)  # a peer's move, first
try:
    os.rename(src, dst)
except FileNotFoundError:
    print("handled")  # the program's own handling: it decides
"""


def test_a_deferred_record_says_what_deferred_it(fsguard_python: Path, tmp_path: Path) -> None:
    """Issue 45: a ``deferred`` record names what decided instead of fsguard (the handler, where, and why), and
    ``report`` shows it in every form."""
    program, log = tmp_path / "program.py", tmp_path / "log"
    program.write_text(DEFERRED)
    (tmp_path / "work").mkdir()
    env = {**TORCHRUN_ENV, "FSGUARD": "1", "FSGUARD_LOG": str(log)}
    done = subprocess.run(
        [str(fsguard_python), str(program), str(tmp_path / "work")], env=clean_env(env), capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout == "handled\n", done.stderr
    status, doc, _ = report_json(fsguard_python, str(log))
    assert status == 1
    (group,) = doc["groups"]
    assert (group["decision"], group["op"], group["count"]) == ("deferred", "rename", 1)
    ((by,),) = [[entry["text"] for entry in group["deferred_by"]]]
    assert by.startswith(f"except FileNotFoundError at {program}:10"), by
    human = fsguard(fsguard_python, "report", str(log)).stdout
    compact = "".join(human.split())  # its lines wrapped, at a space or inside a long path
    assert f"deferexceptFileNotFoundErrorat{program}:10:" in compact, human
    markdown = fsguard(fsguard_python, "report", "--markdown", str(log)).stdout
    assert f"deferred by: except FileNotFoundError at {program}:10" in markdown, markdown
    fsguard(fsguard_python, "report", "--html", str(tmp_path / "report.html"), str(log))
    page = (tmp_path / "report.html").read_text()
    assert f"<b>deferred by</b> except FileNotFoundError at {program}:10" in page
