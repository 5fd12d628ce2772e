"""Old releases of third-party libraries, installed apart from the test environment: ``pip install --target``.

A test that must run the exact release an issue names (a version whose code has the race) puts the returned
directory first on ``PYTHONPATH``: its packages shadow the test environment's newer ones, and everything it
does not hold (torch, numpy) comes from the test environment as usual. Installed once per machine into a
cache directory keyed by the requirements; a failed install leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .env import clean_env

CACHE = Path(os.environ.get("FSGUARD_TEST_CACHE", Path.home() / ".cache" / "fsguard-tests")) / "pinned"


def pinned_site(*requirements: str, timeout: float = 600) -> Path:
    """A directory holding exactly ``requirements`` (pinned, installed without their dependencies: list every
    package that must differ from the test environment's)."""
    key = hashlib.sha256("\n".join(sorted(requirements)).encode()).hexdigest()[:16]
    target = CACHE / key
    if (target / ".complete").exists():
        return target
    partial = CACHE / f"{key}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--no-deps",
                "--target",
                str(partial),
                *requirements,
            ],
            check=True,
            env=clean_env(),
            capture_output=True,
            timeout=timeout,
        )
        (partial / ".complete").write_text("\n".join(requirements) + "\n")
        shutil.rmtree(target, ignore_errors=True)
        os.replace(partial, target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target
