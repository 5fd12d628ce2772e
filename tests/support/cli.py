"""The ``fsguard`` command, as a user runs it: ``python -m fsguard ...`` in a fresh interpreter."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

from .env import clean_env


def run_cli(
    python: Path | str,
    *args: str,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    timeout: float = 60,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m fsguard *args`` with a clean environment plus ``env``; output decoded (UTF-8, replaced)."""
    done = subprocess.run(
        [str(python), "-m", "fsguard", *args],
        check=False,
        env=clean_env(env),
        input=stdin,
        capture_output=True,
        timeout=timeout,
        cwd=cwd,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    )
