"""CPython's own tests of the guarded modules pass with fsguard on: forced (``FSGUARD=force``, no launcher) and in
a launched rank (``FSGUARD=1`` with a torchrun job's variables: peers present, a job tag, no peer acting).

``python -m test test_os test_shutil test_pathlib test_tempfile`` in the wheel's venv (the base interpreter's
``test`` package), patched in every process: outside races fsguard must change nothing, and where a test
expects an error (``assertRaises``), the error is the test's (deferred to it). The launched run starts through
the parity tables' stand-in for the launcher's agent (``tests/parity_support.py``), so the job starts with it.
Should a suite fail, the same run without fsguard tells a regression from a failure of the machine (which skips,
with both summaries). Skipped where the interpreter has no ``test`` package. About a minute each on 2 cores.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fsguard.records import parse_line
from tests.conftest import clean_env
from tests.parity_support import AGENT, LAUNCHED

SUITES = ("test_os", "test_shutil", "test_pathlib", "test_tempfile")
MODES = {"force": {"FSGUARD": "force"}, "launched": LAUNCHED, "off": {"FSGUARD": "0"}}


PATCHED = (
    "import os, shutil; print(sorted(f.__name__ for f in (os.makedirs, shutil.rmtree) if hasattr(f, '__wrapped__')))"
)


def _run(python: Path, mode: str, where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    where.mkdir(exist_ok=True)
    agent = AGENT if mode == "launched" else []
    return subprocess.run(
        [*agent, str(python), *(args or ("-m", "test", *SUITES))],
        env=clean_env(MODES[mode]),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=where,
    )


@pytest.mark.stdlib
@pytest.mark.timeout(1300)
@pytest.mark.parametrize("mode", ["force", "launched"])
def test_cpython_suites_pass_with_fsguard(fsguard_python: Path, tmp_path: Path, mode: str) -> None:
    probe = subprocess.run([str(fsguard_python), "-c", "import test.support"], capture_output=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip("this interpreter has no 'test' package")
    patched = _run(fsguard_python, mode, tmp_path / mode, "-c", PATCHED)
    assert patched.stdout.split() == ["['makedirs',", "'rmtree']"], patched.stderr  # the mode patches
    forced = _run(fsguard_python, mode, tmp_path / mode)
    summary = forced.stdout[-1500:]
    if forced.returncode != 0:
        plain = _run(fsguard_python, "off", tmp_path / "off")
        if plain.returncode != 0:
            pytest.skip(f"fails without fsguard too:\n{plain.stdout[-1500:]}\nwith:\n{summary}")
        pytest.fail(f"fails only with fsguard ({mode}):\n{summary}\n{forced.stderr[-3000:]}")
    assert "Result: SUCCESS" in forced.stdout, summary
    # What fsguard wrote are records (of races the suites' own clean-up meets), nothing else.
    for line in (forced.stdout + forced.stderr).splitlines():
        if line.startswith("fsguard:"):
            assert parse_line(line) is not None, line
