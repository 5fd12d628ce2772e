"""Shared fixtures: fsguard built as a wheel and installed into fresh virtual environments, once per run.

Tests start fresh interpreters from these environments, so the real ``fsguard.pth`` runs at startup.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
import venv
from collections.abc import Mapping
from pathlib import Path

import pytest

from fsguard.launcher import JOB_VARIABLE_PREFIXES  # what makes a process part of a job

ROOT = Path(__file__).resolve().parent.parent


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The current environment without fsguard or launcher variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(JOB_VARIABLE_PREFIXES)}
    env.pop("PYTHONPATH", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if extra:
        env.update(extra)
    return env


def _make_venv(where: Path, wheel: Path, with_test_deps: bool) -> Path:
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # Install with the test environment's pip into the new environment (no pip inside it: faster).
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)], check=True
    )
    wrapt_dir = Path(__import__("wrapt").__file__).parent
    (Path(purelib) / "wrapt").symlink_to(wrapt_dir)  # the runtime dependency, same version as tested
    _add_coverage_startup(Path(purelib))
    if with_test_deps:
        # torch, filelock, coverage... from the test environment, appended after the venv's own packages.
        (Path(purelib) / "zz_fsguard_testdeps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python


_COVERAGE_START = """\
\"\"\"Starts coverage.py in this interpreter when COVERAGE_PROCESS_START is set (scripts/test.sh sets it).\"\"\"
import os
import sys

if os.environ.get("COVERAGE_PROCESS_START"):
    sys.path.append({where!r})
    try:
        import coverage

        coverage.process_startup()
    except ImportError:
        pass
    finally:
        sys.path.remove({where!r})  # coverage stays loaded; nothing else of the test environment leaks in
"""


def _add_coverage_startup(purelib: Path) -> None:
    """Measure fsguard in every interpreter of this environment, from before ``fsguard.pth`` runs.

    ``.pth`` files run in name order, so ``00-fsguard-coverage.pth`` starts coverage first and the startup
    path (``fsguard.pth`` -> ``fsguard._boot``) is measured too.
    """
    where = str(Path(__import__("coverage").__file__).parent.parent)
    (purelib / "_fsguard_coverage_start.py").write_text(_COVERAGE_START.format(where=where))
    (purelib / "00-fsguard-coverage.pth").write_text("import _fsguard_coverage_start\n")


STRICT_SKIPS = ("simulated cluster:", "FUSE unavailable", "openmpi-bin", "slurm-wlm", "cannot be installed")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """Under ``FSGUARD_TESTS_STRICT=1`` (.ci/run), a test skipped for missing FUSE, unshare or mpirun fails."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and os.environ.get("FSGUARD_TESTS_STRICT") == "1":
        reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
        if any(marker in reason for marker in STRICT_SKIPS):
            report.outcome = "failed"
            report.longrepr = f"skipped where CI requires it to run (FSGUARD_TESTS_STRICT=1): {reason}"
    return None


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
        check=True,
    )
    (built,) = out.glob("fsguard-*.whl")
    return built


@pytest.fixture(scope="session")
def fsguard_python(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh venv's python with fsguard installed from the wheel; torch and test deps importable."""
    return _make_venv(tmp_path_factory.mktemp("venv") / "env", wheel, with_test_deps=True)


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh venv's python with only fsguard and wrapt: no torch, no filelock."""
    return _make_venv(tmp_path_factory.mktemp("bare") / "env", wheel, with_test_deps=False)


def run_python(
    python: Path,
    code: str,
    env: Mapping[str, str] | None = None,
    *,
    args: tuple[str, ...] = (),
    timeout: float = 120,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with a clean environment plus ``env``."""
    return subprocess.run(
        [str(python), *args, "-c", textwrap.dedent(code)],
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


TORCHRUN_ENV = {
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "4",
    "TORCHELASTIC_RUN_ID": "test",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}
