"""``fsguard demo`` (issue 7): the unguarded run crashes on the races, the guarded run absorbs them all."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.support.cli import run_cli

OPS = {"makedirs", "rename", "replace", "rmtree", "remove", "symlink"}


def demo(
    python: Path, tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    keep = tmp_path / "demo"
    done = run_cli(
        python, "demo", "--ranks", "4", "--steps", "2", "--keep", str(keep), *args, env=env, timeout=170, cwd=tmp_path
    )
    summary_file = keep / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    return done, summary


def check_unguarded(before: dict[str, Any]) -> None:
    assert before["exit_code"] != 0
    assert before["fsguard_active_ranks"] == 0
    assert len(before["crashed"]) >= 1
    assert {c["error"] for c in before["crashed"].values()} == {"FileExistsError"}
    assert before["finished"] == []


def check_guarded(after: dict[str, Any]) -> None:
    assert after["exit_code"] == 0
    assert after["fsguard_active_ranks"] == 4
    assert after["finished"] == [0, 1, 2, 3]
    assert after["crashed"] == {} and after["stopped"] == []
    assert set(after["absorbed_by_op"]) == OPS
    assert set(after["decisions"]) == {"absorbed"}, after["decisions"]  # no hazard, no conflict
    assert after["file_problems"] == []


@pytest.mark.timeout(200)
@pytest.mark.parametrize("which, launcher", [("fsguard_python", "torchrun"), ("bare_python", "local")])
def test_demo_before_and_after(which: str, launcher: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    python = request.getfixturevalue(which)
    done, summary = demo(python, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert summary["launcher"] == launcher
    check_unguarded(summary["without_fsguard"])
    check_guarded(summary["with_fsguard"])
    assert summary["guarded_run_ok"] is True
    out = done.stdout
    assert "[1/2] without fsguard" in out and "[2/2] with fsguard" in out
    assert "crashed: FileExistsError" in out  # progress while it runs
    assert "ok on all 4 ranks" in out
    assert "races absorbed" in out and "ranks crashed" in out
    assert "guarded run: succeeded" in out
    assert "train.py:" in out  # records name the call site in the job's script (report or plain count)
    check_report_paths(out, tmp_path / "demo" / "with-fsguard" / "records")
    check_page(out, tmp_path / "demo")


def check_page(out: str, keep: Path) -> None:
    """The demo ends with the path of its guarded run's report as a web page, which holds every record."""
    page = keep / "report.html"
    assert out.rstrip().splitlines()[-1] == f"HTML report of the guarded run: {page}"
    text = page.read_text()
    found = re.search(r'<script type="application/json" id="cells">(.*?)</script>', text, re.DOTALL)
    assert found
    records = sum(len(p.read_text().splitlines()) for p in (keep / "with-fsguard" / "records").iterdir())
    assert sum(cell["total"] for cell in json.loads(found.group(1))) == records > 0
    assert "No hazards or conflicts" in text and text.count('<g class="lane') == 4


def check_report_paths(out: str, records_dir: Path) -> None:
    """The report keeps names readable: every path's final component whole, no ``<n>`` inside a word."""
    from fsguard.audit import patterns
    from fsguard.records import parse_line

    report = out[out.index("$ fsguard report") :]
    assert not re.search(r"[A-Za-z]<n>[A-Za-z0-9]", report), report
    assert "fsguard-demo-" not in report or "<n>" not in report.split("fsguard-demo-")[1][:9]
    finals = set()
    for name in os.listdir(records_dir):
        for line in (records_dir / name).read_text().splitlines():
            record = parse_line(line)
            if record is not None:
                finals |= {patterns.fold_component(str(a).rstrip("/").rsplit("/", 1)[-1]) for a in record.args}
    assert finals
    for final in finals:
        assert re.search(rf"/{re.escape(final)}(?: |$)", report, re.MULTILINE), (final, report)


@pytest.mark.timeout(120)
def test_demo_serialized_with_mini_launcher(bare_python: Path, tmp_path: Path) -> None:
    done, summary = demo(bare_python, tmp_path, "--serialize")
    assert done.returncode == 0, done.stdout + done.stderr
    assert summary["serialize"] is True
    check_unguarded(summary["without_fsguard"])
    check_guarded(summary["with_fsguard"])


@pytest.mark.timeout(120)
def test_demo_without_the_pth_fails_and_says_why(tmp_path: Path) -> None:
    """From a source tree, without fsguard installed, nothing activates fsguard: the demo must not claim success."""
    done, summary = demo(Path(sys.executable), tmp_path, "--launcher", "local", env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no fsguard.pth" in done.stdout
    assert summary["guarded_run_ok"] is False
    assert summary["with_fsguard"]["fsguard_active_ranks"] == 0


def test_demo_rejects_bad_options(bare_python: Path, tmp_path: Path) -> None:
    done = run_cli(bare_python, "demo", "--ranks", "1")
    assert done.returncode == 2 and "at least 2" in done.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    done = run_cli(bare_python, "demo", "--keep", str(tmp_path / "full"))
    assert done.returncode == 2 and "not empty" in done.stderr
