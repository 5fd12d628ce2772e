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
from tests.support.cli import run_cli

DATA = ROOT / "tests" / "data" / "audit"
UNGUARDED = DATA / "unguarded"


def fsguard(python: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(python, *args, env={"TZ": "UTC"}, stdin=stdin)


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
    # Every rank removes a "staging" tree: the kind a peer may be committing with a rename (issue 12), so it
    # is not "absorbed by default": the verdict names the data-loss risk and the fix.
    "rmtree.log": [
        (
            "serialize",
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
    # torch inductor re-raises the OSError inside its own InductorError, with the original frames.
    # The failing rmdir ran in a thread pool's worker; a future carried its error to the main thread, so fsguard
    # would leave it to the program (deferred): not "absorbed by default" (issue 45).
    "inductor-cxxbuild.log": [
        (
            "depends",
            "rmdir",
            "/work/acc-venv/lib/python3.11/site-packages/torch/_inductor/cpp_builder.py:690 in _remove_dir",
            "FileNotFoundError",
            "ENOENT",
            1,
            [3],
        )
    ],
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_torchrun_logs(fsguard_python: Path, name: str) -> None:
    status, doc = scan_json(fsguard_python, str(UNGUARDED / name))
    assert status == 1
    assert findings(doc) == REAL[name]
    assert doc["problems"] == []


# Known library bugs (scan.KNOWN_BUGS): whatever the failing call, the job's failure is the library's ordering
# or shared writer (tests/test_real_programs.py runs both jobs), so every finding is not fixable and counts.
KNOWN_BUGS = {
    "torch-hub-reload.log": [
        (
            "not fixable",
            "torch.hub",
            "/work/main/.venv/lib/python3.11/site-packages/torch/hub.py:118 in _import_module",
            "FileNotFoundError",
            "ENOENT",
            1,
            [2],
        ),
        (
            "not fixable",
            "torch.hub",
            "/work/main/.venv/lib/python3.11/site-packages/torch/hub.py:125 in _remove_if_exists",
            "FileNotFoundError",
            "ENOENT",
            1,
            [3],
        ),
        (
            "not fixable",
            "torch.hub",
            "/work/main/.venv/lib/python3.11/site-packages/torch/hub.py:169 in _safe_extract_zip",
            "FileExistsError",
            "EEXIST",
            1,
            [0],
        ),
    ],
    "datasets-two-nodes.log": [
        (
            "not fixable",
            "datasets",
            "/root/.cache/fsguard-tests/pinned/2935ff3b4f304dbc/datasets/builder.py:1124 in _download_and_prepare",
            "OSError",
            None,
            1,
            [],
        )
    ],
}


@pytest.mark.parametrize("name", sorted(KNOWN_BUGS))
def test_known_library_bugs(fsguard_python: Path, name: str) -> None:
    status, doc = scan_json(fsguard_python, str(UNGUARDED / name))
    assert status == 1
    assert findings(doc) == KNOWN_BUGS[name]
    assert all(f["race"] and f["why"] for f in doc["findings"])
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
    assert lines[:6] == [
        "fsguard scan: 8 call sites with filesystem errors in 7 inputs: 3 absorbed by",
        "default, 1 depends on the program's handling, 2 need serialization, 2 not",
        "fixable",
        "",
        "   VERDICT      OP          ERROR                         N  RANKS       HOSTS",
        "!! serialize    rename      OSError ENOTEMPTY             3  0,2-3           ?",
    ]
    assert lines[6:11] == [
        "     at    /tmp/races/notempty_race.py:11 in publish",
        "     path  /tmp/races/w_notempty/tmp-rank<n> -> /tmp/races/w_notempty/published",
        lines[8],
        "     why   a directory was renamed onto a non-empty one: ranks interleaved",
        "           removing and renaming it; FSGUARD_SERIALIZE=1 runs those calls one",
    ]
    assert lines[8].startswith("     seen  ") and lines[8].endswith("/unguarded/notempty.log:5")
    assert "   absorbed     makedirs    FileExistsError EEXIST        3  1-3             ?" in lines
    assert "   not fixable  mkdir       FileNotFoundError ENOENT      1  0               ?" in lines
    assert lines[-4:] == [
        "absorbed: fsguard's default mode (FSGUARD=1) absorbs it; serialize: it needs",
        "FSGUARD=1 FSGUARD_SERIALIZE=1; not fixable: fsguard rightly re-raises it.",
        "depends: a race fsguard absorbs only if the error would end its thread; the log",
        "shows the program's own handling on the way, or cannot show it reached the top.",
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
        (
            "serialize",  # a staging tree: it may race a rename (issue 12)
            "rmtree",
            "/tmp/races/rmtree_race.py:6 in cleanup_staging",
            "FileNotFoundError",
            "ENOENT",
            2,
            [1, 3],
        ),
        MAKEDIRS,
    ]


def test_usage_error(fsguard_python: Path) -> None:
    assert fsguard(fsguard_python, "scan").returncode == 2


def test_staging_rmtree_names_the_rename_race(fsguard_python: Path) -> None:
    status, doc = scan_json(fsguard_python, str(UNGUARDED / "rmtree.log"))
    (finding,) = doc["findings"]
    assert status == 1 and finding["verdict"] == "serialize"
    assert "rename" in finding["why"] and "FSGUARD_YIELD_S" in finding["why"] and "loses data" in finding["why"]


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
        ("rmdir", "ENOENT", "absorbed"),
        ("rmdir", "ENOTEMPTY", "not fixable"),
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
    from fsguard.audit.scan import verdict

    decided, why = verdict(op, errno_name)
    assert decided == expected
    assert why.endswith(".") and why.count(". ") == 0  # one sentence


def test_every_guard_tells_scan_its_verdicts() -> None:
    """Each guard module ends in its ``SCAN`` table, and scan's verdict for every (operation, error) of every row
    is that row's: scan restates no rule of its own."""
    import pkgutil

    from fsguard import guards
    from fsguard.audit import scan

    modules = {m.name for m in pkgutil.iter_modules(guards.__path__) if not m.name.startswith("_")}  # rules
    assert modules == {rule.__name__.rsplit(".", 1)[-1] for rule in scan.RULES}
    rows = [*guards.SCAN, *[row for rule in scan.RULES for row in rule.SCAN]]
    assert all(rule.SCAN for rule in scan.RULES)
    for row in rows:
        assert row.verdict in (guards.ABSORBED, guards.SERIALIZE, guards.NOT_FIXABLE) and row.ops and row.errors
        for op in row.ops:
            for name in row.errors:
                assert scan.verdict(op, name, staging=row.staging) == (row.verdict, row.why), (op, name)
                if op != guards.EVERY_OP and not row.staging:  # a staging row holds only for a staging tree
                    assert scan.verdict(op, name, staging=True)[0] in (row.verdict, guards.SERIALIZE)
    assert sum(len(row.ops) * len(row.errors) for row in rows) == len(scan.VERDICTS)  # no row hides another


# Where each rule absorbs, a peer of this job has just done the same: the world of that row, in a temporary
# directory. The rule itself then decides every error its operation's rows name; it absorbs exactly those
# the table says ``absorbed``.
def _peer_did_it(op: str, tmp: Path) -> tuple[Any, ...]:
    """The call's arguments, after a peer made its result moments ago."""
    import os

    if op in ("makedirs", "mkdir"):
        (tmp / "made").mkdir()
        return (str(tmp / "made"),)
    if op in ("remove", "rmdir"):
        (tmp / "gone").touch()
        (tmp / "gone").unlink()  # its directory changed moments ago
        return (str(tmp / "gone"),)
    if op in ("rename", "replace"):
        (tmp / "dst").mkdir()
        return (str(tmp / "src"), str(tmp / "dst"))
    if op == "symlink":
        os.symlink("target", tmp / "link")
        return ("target", str(tmp / "link"))
    assert op == "link"
    (tmp / "file").touch()
    os.link(tmp / "file", tmp / "hard")
    return (str(tmp / "file"), str(tmp / "hard"))


def _decide(op: str, error: OSError, args: tuple[Any, ...]) -> Any:
    """The guard's rule for ``op``, called as ``fsguard.patching`` calls it (the one place that knows how)."""
    import time

    from fsguard.calls import Call
    from fsguard.guards import Rules, link, makedirs, mkdir, remove, rename, symlink
    from fsguard.world import LIVE

    rule = {"makedirs": makedirs, "mkdir": mkdir, "remove": remove, "rmdir": remove, "rename": rename}
    rule |= {"replace": rename, "symlink": symlink, "link": link}
    return rule[op].decide(Call(op, args, {}), error, LIVE, Rules(0.0, 60.0, time.time() - 10, peers=True))


@pytest.mark.parametrize("op", ["makedirs", "mkdir", "remove", "rmdir", "rename", "replace", "symlink", "link"])
def test_each_rule_absorbs_what_its_scan_table_says(op: str, tmp_path: Path) -> None:
    """In-process, against a real directory: scan's verdicts are what the rule does (rmtree's are its walk's)."""
    import errno

    from fsguard import guards
    from fsguard.audit import scan

    names = sorted({name for (row_op, name, _) in scan.VERDICTS if row_op in (op, guards.EVERY_OP)})
    absorbed = []
    for name in names:
        case = tmp_path / name
        case.mkdir()
        args = _peer_did_it(op, case)
        number = getattr(errno, name)
        if _decide(op, OSError(number, f"[Errno {number}]", args[-1]), args).absorb:
            absorbed.append(name)
    assert absorbed == [name for name in names if scan.verdict(op, name)[0] == guards.ABSORBED]
    assert absorbed  # every rule absorbs one error of a peer's duplicate


# Ordering races outside the guarded calls (real torchrun logs, scripts/staging_race.py): rank 0 renamed the
# staging directory while ranks 1-3 still listed or wrote into it.
ORDERING = {
    "staging-listdir.log": ("listdir", "FileNotFoundError", "ENOENT", "/tmp/races/staging_race.py:7 in write_shard"),
    "staging-torch-save.log": ("torch.save", "RuntimeError", None, "/tmp/races/staging_race.py:10 in write_shard"),
    "staging-safetensors.log": ("save_file", "SafetensorError", None, "/tmp/races/staging_race.py:13 in write_shard"),
}


@pytest.mark.parametrize("name", sorted(ORDERING))
def test_ordering_races_outside_guarded_calls(fsguard_python: Path, name: str) -> None:
    status, doc = scan_json(fsguard_python, str(UNGUARDED / name))
    assert status == 1
    (finding,) = doc["findings"]
    op, error_type, errno_name, site = ORDERING[name]
    assert (finding["verdict"], finding["op"], finding["site_text"]) == ("not fixable", op, site)
    assert (finding["error"]["type"], finding["error"]["errno"]) == (error_type, errno_name)
    assert (finding["race"], finding["ordering"], finding["ranks"]) == (True, True, [1, 2, 3])
    assert finding["paths"][0]["pattern"].endswith("/tmp-checkpoint-<n>")
    assert finding["why"].startswith("an ordering bug") and "tmp-checkpoint-<n>" in finding["why"]
    assert "barrier" in finding["why"]
    human = fsguard(fsguard_python, "scan", str(UNGUARDED / name))
    assert human.returncode == 1
    assert re.search(rf"^!! not fixable  {re.escape(op)} ", human.stdout, re.MULTILINE), human.stdout
    assert "(ordering races: 1)" in human.stdout.replace("\n", " ")


def test_missing_input_is_not_a_race(fsguard_python: Path) -> None:
    """All four ranks fail to open data/train.csv, never created: not a staging directory, nothing listed."""
    done = fsguard(fsguard_python, "scan", str(UNGUARDED / "missing-input.log"))
    assert "FileNotFoundError: [Errno 2]" in (UNGUARDED / "missing-input.log").read_text()
    assert (done.returncode, done.stdout) == (0, "fsguard scan: no filesystem-race tracebacks in 1 input\n")


def test_one_rank_missing_a_staging_dir_is_listed_not_counted(fsguard_python: Path, tmp_path: Path) -> None:
    """Only rank 1's traceback: no other rank failed on the directory, no rename of it printed: not proven."""
    lines = (UNGUARDED / "staging-listdir.log").read_text().splitlines()
    (tmp_path / "rank1.log").write_text("\n".join(line for line in lines if line.startswith("[rank1]")) + "\n")
    status, doc = scan_json(fsguard_python, str(tmp_path / "rank1.log"))
    assert status == 0
    (finding,) = doc["findings"]
    assert (finding["verdict"], finding["race"], finding["ranks"]) == ("not fixable", False, [1])
    assert "nothing in the inputs shows another rank moving or removing it" in finding["why"]


def test_one_rank_missing_a_staging_dir_a_peer_renamed(fsguard_python: Path, tmp_path: Path) -> None:
    """Rank 1's listdir failure plus another rank's failed rename of the same directory: proven."""
    lines = (UNGUARDED / "staging-listdir.log").read_text().splitlines()
    rank1 = [line for line in lines if line.startswith("[rank1]")]
    rename = [
        "[rank2]: Traceback (most recent call last):",
        '[rank2]:   File "/tmp/races/staging_race.py", line 24, in checkpoint',
        "[rank2]:     os.rename(staging, final)",
        "[rank2]: FileNotFoundError: [Errno 2] No such file or directory: "
        "'/tmp/races/w_listdir/tmp-checkpoint-1' -> '/tmp/races/w_listdir/checkpoint-1'",
    ]
    (tmp_path / "job.log").write_text("\n".join(rank1 + rename) + "\n")
    status, doc = scan_json(fsguard_python, str(tmp_path / "job.log"))
    assert status == 1
    ordering = [f for f in doc["findings"] if f["ordering"]]
    assert [(f["op"], f["race"], f["ranks"]) for f in ordering] == [("listdir", True, [1])]


@pytest.mark.parametrize(
    ("directory", "staging"),
    [
        ("/shared/run/tmp-checkpoint-1", True),
        ("/shared/run/checkpoint-1.tmp", True),
        ("/shared/run/.staging", True),
        ("/shared/run/step_100_partial", True),
        ("/tmp/tmpa8f_3kq1", True),
        ("/tmp", False),
        ("/var/tmp", False),
        ("/tmp/races/w_input/data", False),
        ("/shared/run/checkpoint-1", False),
        ("/shared/template", False),
    ],
)
def test_staging_directories(directory: str, staging: bool) -> None:
    from fsguard.audit.ordering import staging_like

    assert staging_like(directory) is staging


@pytest.mark.parametrize(
    ("path", "pattern"),
    [
        ("/tmp/fsguard-demo-h7gtusfl/job/checkpoint-49", "/tmp/fsguard-demo-h7gtusfl/job/checkpoint-<n>"),
        ("/runs/exp12/rank3.tmp.81234", "/runs/exp<n>/rank<n>.tmp*"),
        ("/c/0123abcd9f8e7d6c/x", "/c/<hex>/x"),
        ("/c/123e4567-e89b-12d3-a456-426614174000.json", "/c/<uuid>.json"),
        ("/data/2026/12/03/shard-0007.bin", "/data/<n>/<n>/<n>/shard-<n>.bin"),
        ("/a/h7g/b3x9k", "/a/h7g/b3x9k"),
    ],
)
def test_patterns_keep_words_readable(path: str, pattern: str) -> None:
    from fsguard.audit.patterns import fold

    assert fold(path) == pattern


def test_patterns_shorten_in_the_middle() -> None:
    from fsguard.audit.patterns import shorten

    long = "/tmp/fsguard-demo-h7gtusfl/with-fsguard/job/checkpoints/step-<n>"
    assert shorten(long, 40) == "/tmp/.../job/checkpoints/step-<n>"
    assert shorten(long, 20) == "/tmp/.../step-<n>"
    assert shorten(long, 10) == "/tmp/.../step-<n>"  # the final component stays whole
    hashed = "/work/cache/inductor/ub/cub5mutfiw3i6y422kswzpf3edv32g7eyr3wauapwko4y6ncsstp.main_CxxBuild"
    assert shorten(hashed, 60) == "/work/.../cub5mutfiw3i6y4...3wauapwko4y6ncsstp.main_CxxBuild"  # too wide alone
    pair = "/alpha/beta/gamma/delta/tmp-checkpoint-<n> -> /alpha/beta/gamma/delta/checkpoint-<n>"
    assert shorten(pair, 70) == "/alpha/.../delta/tmp-checkpoint-<n> -> /alpha/.../delta/checkpoint-<n>"
    assert shorten(pair, 60) == "/alpha/.../tmp-checkpoint-<n> -> /alpha/.../checkpoint-<n>"
    assert shorten(pair, 200) == pair


def test_fsguard_and_wrapt_frames_never_name_the_operation() -> None:
    """A guarded job's traceback passes through fsguard's and wrapt's frames; their names are not operations."""
    from fsguard.audit.scan import operation
    from fsguard.audit.tracebacks import Frame

    frames = [
        Frame("/job/train.py", 12, "main", "os.makedirs(out)"),
        Frame("/venv/lib/python3.11/site-packages/wrapt/patches.py", 40, "move"),
        Frame("/venv/lib/python3.11/site-packages/fsguard/patching.py", 90, "rename"),
        Frame("/usr/lib/python3.11/os.py", 225, "makedirs"),
    ]
    op, site = operation(frames)
    assert (op, site.text() if site else None) == ("makedirs", "/job/train.py:12 in main")


def test_subcommands_are_imported_only_when_they_run(fsguard_python: Path) -> None:
    code = (
        "import sys; from fsguard.cli.__main__ import main; main(sys.argv[1:]); "
        "print(sorted(m for m in sys.modules if m.startswith(('fsguard.cli.', 'fsguard.audit'))), file=sys.stderr)"
    )

    def loaded(*args: str) -> str:
        done = subprocess.run(
            [str(fsguard_python), "-c", code, *args], env=clean_env(), capture_output=True, text=True, check=False
        )
        return done.stderr.strip().splitlines()[-1]

    assert loaded("status") == "['fsguard.cli.__main__', 'fsguard.cli.status']"
    scan = loaded("scan", str(UNGUARDED / "makedirs.log"))
    assert "fsguard.cli.scan" in scan and "fsguard.cli.report" not in scan and "fsguard.cli.demo" not in scan


def test_disk_full_and_permission_errors_in_a_staging_dir_are_not_races(fsguard_python: Path, tmp_path: Path) -> None:
    """Several ranks failing in one staging directory, but with ENOSPC or EACCES: genuine errors, not listed."""

    def traceback(rank: int, call: str, error: str) -> list[str]:
        return [
            f"[rank{rank}]: Traceback (most recent call last):",
            f'[rank{rank}]:   File "/job/train.py", line 30, in save',
            f"[rank{rank}]:     {call}",
            f"[rank{rank}]: {error}",
        ]

    lines: list[str] = []
    for rank in (1, 2):
        lines += traceback(
            rank,
            f"open(os.path.join(staging, 'rank{rank}.pt'), 'wb')",
            f"OSError: [Errno 28] No space left on device: '/shared/run/tmp-checkpoint-1/rank{rank}.pt'",
        )
        lines += traceback(
            rank + 2,
            "os.listdir(staging)",
            "PermissionError: [Errno 13] Permission denied: '/shared/run/tmp-checkpoint-1'",
        )
    (tmp_path / "job.log").write_text("\n".join(lines) + "\n")
    done = fsguard(fsguard_python, "scan", str(tmp_path / "job.log"))
    assert (done.returncode, done.stdout) == (0, "fsguard scan: no filesystem-race tracebacks in 1 input\n")


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
elif which == "rmdir":
    os.rmdir(os.path.join(d, "build_CxxBuild"))
elif which == "path-rmdir":
    pathlib.Path(d, "build_CxxBuild").rmdir()
elif which == "wrapped":  # a library's own exception around the OSError, as torch inductor raises it
    class InductorError(RuntimeError):
        pass
    try:
        os.rmdir(os.path.join(d, "build_CxxBuild"))
    except OSError as e:
        raise InductorError(f"{type(e).__name__}: {e}").with_traceback(e.__traceback__) from None
"""


@pytest.mark.parametrize(
    ("which", "op", "error"),
    [
        ("remove", "remove", "FileNotFoundError"),
        ("unlink", "remove", "FileNotFoundError"),
        ("mkdir", "mkdir", "FileExistsError"),
        ("symlink", "symlink", "FileExistsError"),
        ("link", "link", "FileExistsError"),
        ("rmdir", "rmdir", "FileNotFoundError"),
        ("path-rmdir", "rmdir", "FileNotFoundError"),
        ("wrapped", "rmdir", "FileNotFoundError"),
    ],
)
def test_scan_recognises_remove_mkdir_symlink_link(
    fsguard_python: Path, tmp_path: Path, which: str, op: str, error: str
) -> None:
    """Real tracebacks of the newer guarded operations (and their pathlib forms), without fsguard."""
    script = tmp_path / "housekeeping.py"
    script.write_text(FAMILY_SCRIPT)
    done = subprocess.run([str(fsguard_python), str(script), which], env=clean_env(), capture_output=True, text=True)
    assert done.returncode == 1 and error in done.stderr, done.stderr
    log = tmp_path / "rank.log"
    log.write_text(done.stderr)
    code, document = scan_json(fsguard_python, str(log))
    assert code == 1
    (finding,) = document["findings"]
    assert (finding["verdict"], finding["op"], finding["error"]["type"]) == ("absorbed", op, error)
    assert finding["site_text"].startswith(f"{script}:")


# Issue 45: races whose tracebacks cannot prove fsguard absorbs them. DCP's coordinators renamed one .metadata.tmp
# inside all_reduce's handler (CheckpointException's nested traceback starts there); the hub's rename inside
# shutil.move was handled by its copy fallback, which failed in turn (a chain of three tracebacks).
DEPENDING = {
    "dcp-node-groups.log": ("rename", "torch/distributed/checkpoint/filesystem.py:537 in rename"),
    "hub-blob-move.log": ("move", "?"),
}


@pytest.mark.parametrize("name", sorted(DEPENDING))
def test_a_race_the_log_cannot_prove_absorbable_depends_on_the_program(fsguard_python: Path, name: str) -> None:
    status, doc = scan_json(fsguard_python, str(UNGUARDED / name))
    assert status == 1
    op, site = DEPENDING[name]
    (found,) = [f for f in doc["findings"] if f["op"] == op]
    assert found["verdict"] == "depends" and found["site_text"].endswith(site), found
    assert "depends on the program's handling" in found["why"], found["why"]
    assert not [f for f in doc["findings"] if f["verdict"] == "absorbed"], doc["findings"]
    human = fsguard(fsguard_python, "scan", str(UNGUARDED / name)).stdout
    assert " 0 absorbed by default, 1 depends on the program's handling" in " ".join(human.split()), human


HANDLED = """
import logging, os, sys, tempfile, threading
where = tempfile.mkdtemp()
gone, there = os.path.join(where, "tmp-checkpoint-1"), os.path.join(where, "checkpoint-1")
os.mkdir(there)


def save():
    os.rename(gone, there)


how = sys.argv[1]
if how == "converted":
    try:
        save()
    except OSError as error:
        raise RuntimeError("could not save the checkpoint") from error
elif how == "logged":  # a handler in a function: its traceback starts there (one at a module's top level that
    # logs looks exactly like the crash: a limit of reading logs)

    def main():
        try:
            save()
        except OSError:
            logging.exception("save failed")

    main()
elif how == "thread":
    thread = threading.Thread(target=save)
    thread.start()
    thread.join()
else:
    save()
"""


@pytest.mark.parametrize(
    ("how", "verdict"), [("converted", "depends"), ("logged", "depends"), ("thread", "absorbed"), ("crash", "absorbed")]
)
def test_a_traceback_proves_a_crash_only_from_a_thread_s_top_and_unhandled(
    fsguard_python: Path, tmp_path: Path, how: str, verdict: str
) -> None:
    """A real program's stderr: an error converted (``raise ... from``) or logged by the program's own handler is
    not a crash fsguard would absorb; one that ends a thread (or the process) unhandled is."""
    program = tmp_path / "program.py"
    program.write_text(HANDLED)
    done = subprocess.run(
        [str(fsguard_python), str(program), how], env=clean_env({"FSGUARD": "0"}), capture_output=True, text=True
    )
    (tmp_path / "job.log").write_text(done.stderr)
    _, doc = scan_json(fsguard_python, str(tmp_path / "job.log"))
    assert [(f["op"], f["verdict"]) for f in doc["findings"]] == [("rename", verdict)], done.stderr
