"""CPython's own tests of the guarded modules pass with fsguard forced on (``FSGUARD=force``).

``python -m test test_os test_shutil test_pathlib test_tempfile`` in the wheel's venv (the base interpreter's
``test`` package), patched in every process: outside races fsguard must change nothing, and where a test
expects an error (``assertRaises``), the error is the test's (deferred to it). Should a suite fail, the same
run without fsguard tells a regression from a failure of the machine (which skips, with both summaries).
Skipped where the interpreter has no ``test`` package. About a minute on 2 cores.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fsguard.records import parse_line
from tests.conftest import clean_env

SUITES = ("test_os", "test_shutil", "test_pathlib", "test_tempfile")


def _run(python: Path, value: str, where: Path) -> subprocess.CompletedProcess[str]:
    where.mkdir()
    return subprocess.run(
        [str(python), "-m", "test", *SUITES],
        env=clean_env({"FSGUARD": value}),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=where,
    )


@pytest.mark.stdlib
@pytest.mark.timeout(1300)
def test_cpython_suites_pass_with_fsguard_forced(fsguard_python: Path, tmp_path: Path) -> None:
    probe = subprocess.run([str(fsguard_python), "-c", "import test.support"], capture_output=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip("this interpreter has no 'test' package")
    forced = _run(fsguard_python, "force", tmp_path / "force")
    summary = forced.stdout[-1500:]
    if forced.returncode != 0:
        plain = _run(fsguard_python, "0", tmp_path / "off")
        if plain.returncode != 0:
            pytest.skip(f"fails without fsguard too:\n{plain.stdout[-1500:]}\nwith:\n{summary}")
        pytest.fail(f"fails only with FSGUARD=force:\n{summary}\n{forced.stderr[-3000:]}")
    assert "Result: SUCCESS" in forced.stdout, summary
    # What fsguard wrote are records (of races the suites' own clean-up meets), nothing else.
    for line in (forced.stdout + forced.stderr).splitlines():
        if line.startswith("fsguard:"):
            assert parse_line(line) is not None, line
