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

# isort: off
from tests.support import workers  # first: an xdist worker's coverage starts before fsguard is imported

COVERAGE = workers.start_coverage()
# isort: on
from tests import skips  # noqa: E402
from tests.support import venvs  # noqa: E402
from tests.support.env import ROOT as ROOT  # noqa: E402
from tests.support.env import TORCHRUN_ENV as TORCHRUN_ENV  # noqa: E402
from tests.support.env import clean_env as clean_env  # noqa: E402

pytest_plugins = ["tests.support.cpu"]  # each test's CPU time, where FSGUARD_TESTS_CPU names a directory


def _make_venv(where: Path, wheel: Path, with_test_deps: bool) -> Path:
    python = venvs.make_venv(where, wheel, test_deps=with_test_deps)
    # every interpreter of the venv is measured, from before fsguard.pth runs (scripts/test.sh)
    venvs.measure_coverage(venvs.purelib(python), str(Path(__import__("coverage").__file__).parent.parent))
    return python


STRICT = os.environ.get("FSGUARD_TESTS_STRICT") == "1"


def _strict(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Under ``FSGUARD_TESTS_STRICT=1`` (.ci/run) a skip fails unless ``tests/skips.py`` lists its reason."""
    if STRICT and report.skipped and not hasattr(report, "wasxfail"):  # an expected failure is no skip
        reason = skips.reason_of(report.longrepr)
        if skips.why_allowed(reason) is None:
            report.outcome = "failed"
            report.longrepr = (
                f"skipped, and CI (FSGUARD_TESTS_STRICT=1) accepts only the skips tests/skips.py lists: {reason}"
            )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    outcome = yield
    _strict(outcome.get_result())  # type: ignore[attr-defined]
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> object:
    outcome = yield
    _strict(outcome.get_result())  # type: ignore[attr-defined]
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workers.order(items)  # xdist groups, slow tests first (tests/support/workers.py)
    workers.publish(config, items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    return workers.make_scheduler(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    workers.save_coverage(COVERAGE)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fsguard's wheel, built once per run (shared by xdist workers)."""
    return workers.once(tmp_path_factory, "wheel", lambda where: venvs.build_wheel(where / "out"))


@pytest.fixture(scope="session")
def fsguard_python(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh venv's python with fsguard installed from the wheel; torch and test deps importable."""
    return workers.once(tmp_path_factory, "venv", lambda where: _make_venv(where / "env", wheel, with_test_deps=True))


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh venv's python with only fsguard and wrapt: no torch, no filelock."""
    return workers.once(tmp_path_factory, "bare", lambda where: _make_venv(where / "env", wheel, with_test_deps=False))


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
