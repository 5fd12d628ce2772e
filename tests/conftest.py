"""Shared fixtures: fsguard built as a wheel and installed into fresh virtual environments, once per run.

Tests start fresh interpreters from these environments, so the real ``fsguard.pth`` runs at startup.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.support import venvs
from tests.support.env import ROOT as ROOT
from tests.support.env import TORCHRUN_ENV as TORCHRUN_ENV
from tests.support.env import clean_env as clean_env


def _make_venv(where: Path, wheel: Path, with_test_deps: bool) -> Path:
    python = venvs.make_venv(where, wheel, test_deps=with_test_deps)
    # every interpreter of the venv is measured, from before fsguard.pth runs (scripts/test.sh)
    venvs.measure_coverage(venvs.purelib(python), str(Path(__import__("coverage").__file__).parent.parent))
    return python


STRICT_SKIPS = (
    "simulated cluster:",
    "FUSE unavailable",
    "JuiceFS unavailable",
    "openmpi-bin",
    "slurm-wlm",
    "cannot be installed",
)


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
    return venvs.build_wheel(tmp_path_factory.mktemp("wheel") / "out")


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


@pytest.fixture(scope="session")
def store_port() -> Iterator[int]:
    """A TCPStore server standing in for the launcher's agent store."""
    from datetime import timedelta

    import torch.distributed as dist

    server = getattr(dist, "TCPStore")(  # noqa: B009 - not re-exported for type checkers
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30)
    )
    yield int(server.port)
    del server
