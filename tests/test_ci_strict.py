"""CI's strictness (issue 48): under ``FSGUARD_TESTS_STRICT=1`` a skip fails unless ``tests/skips.py`` lists its
reason; an expected failure is not a skip. Run on a throwaway test file, with this suite's conftest."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import skips
from tests.support.env import ROOT, clean_env

SAMPLE = """
import pytest

def test_listed():
    pytest.skip("shutil.rmtree has no onexc before Python 3.12")

def test_unlisted():
    pytest.skip("FUSE unavailable: missing bindfs")

@pytest.mark.skipif(True, reason="openmpi-bin (mpirun) is not installed")
def test_unlisted_marker():
    pass

@pytest.mark.xfail(reason="a known gap", strict=True)
def test_expected_failure():
    assert False

def test_passes():
    pass
"""


@pytest.mark.parametrize("strict", ["1", ""])
def test_only_listed_skips_pass_in_ci(strict: str, tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "-rA",
            "-q",
            "--rootdir",
            str(tmp_path),
            # Its own temporary directory: a run in pytest's numbered ones removes the oldest there, a whole earlier
            # run's venvs and mounts' backing directories (53 s of this test in a whole run, issue 48).
            "--basetemp",
            str(tmp_path / "basetemp"),
            "-c",
            "/dev/null",
            str(tmp_path / "test_sample.py"),
        ],
        cwd=ROOT,
        env=clean_env({"FSGUARD_TESTS_STRICT": strict, "PYTHONPATH": str(ROOT)}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    summary = done.stdout.strip().splitlines()[-1]
    if strict:  # a skip at setup (a skipif marker) is reported as an error, one in the test as a failure
        assert done.returncode == 1 and "1 failed, 1 passed, 1 skipped, 1 xfailed, 1 error" in summary, done.stdout
        assert re.search(r"^FAILED \S+::test_unlisted( - .*)?$", done.stdout, re.M), done.stdout[-3000:]
        assert re.search(r"^ERROR \S+::test_unlisted_marker( - .*)?$", done.stdout, re.M), done.stdout[-3000:]
        assert "accepts only the skips tests/skips.py lists: FUSE unavailable: missing bindfs" in done.stdout
    else:
        assert done.returncode == 0 and "1 passed, 3 skipped, 1 xfailed" in summary, done.stdout[-3000:]


def test_every_entry_says_why() -> None:
    for pattern, why in skips.ALLOWED.items():
        assert len(why) > 30, (pattern, why)
    assert skips.why_allowed("FUSE unavailable: missing bindfs") is None
    assert skips.why_allowed("glusterfs not in FSGUARD_TESTS_BACKENDS") is None  # CI selects it (scripts/test.sh)
