"""What every benchmark shares: the machine description, a workspace of fresh venvs, statistics, tables.

Benchmarks build fsguard's wheel from the working tree and install it into virtual environments of their
own in a temporary directory, so they measure what a user gets from ``pip install`` and run on a fresh
machine that only has the test requirements.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

# the bench scripts run with the repository on sys.path: venvs, environments and ports are the tests' own
from tests.support import env as _env
from tests.support import venvs as _venvs
from tests.support.env import ROOT as ROOT

TORCHRUN_ENV = dict(_env.TORCHRUN_ENV, TORCHELASTIC_RUN_ID="bench")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without fsguard or launcher variables or PYTHONPATH, plus ``extra`` (bytecode as is)."""
    return _env.clean_env(extra, bytecode=True)


def _wrapt_version(python: str = sys.executable) -> str:
    out = subprocess.run(
        [python, "-c", "import wrapt; print(wrapt.__version__)"], env=clean_env(), capture_output=True, text=True
    )
    return out.stdout.strip() or "not importable"


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "fsguard"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else None


def machine() -> dict[str, Any]:
    """CPU, cores, Python, wrapt, load: printed beside every result, since timings depend on all of them."""
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "wrapt": _wrapt_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "git": _git_commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def machine_line(info: Mapping[str, Any]) -> str:
    load = info.get("load_average") or []
    return (
        f"machine: {info['cpu']}, {info['cores']} cores, {info['implementation']} {info['python']}, "
        f"wrapt {info['wrapt']}, load {' '.join(str(x) for x in load)}, fsguard {info.get('git')}"
    )


class Workspace:
    """A temporary directory holding the wheel built from the working tree and the venvs made from it.

    Venvs are made once per name and reused by every benchmark of one run (``python -m bench``).
    """

    def __init__(self, where: Path | None = None) -> None:
        self._tmp = None if where else tempfile.TemporaryDirectory(prefix="fsguard-bench-")
        self.path = Path(where) if where else Path(self._tmp.name)  # type: ignore[union-attr]
        self.path.mkdir(parents=True, exist_ok=True)
        self._wheel: Path | None = None
        self._venvs: dict[str, Path | None] = {}

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wheel(self) -> Path:
        if self._wheel is None:
            self._wheel = _venvs.build_wheel(self.path / "wheel")
        return self._wheel

    def venv(self, name: str, *, fsguard: bool = True, wrapt: str = "link", test_deps: bool = False) -> Path | None:
        """The python of venv ``name`` (made on first use), or None if it cannot be made (e.g. offline).

        ``wrapt="link"`` links this interpreter's wrapt (the version under test, no network);
        any other value is a pip requirement fetched from the package index (``wrapt==2.1.*``).
        """
        if name not in self._venvs:
            try:
                wheel = self.wheel() if fsguard else None
                self._venvs[name] = _venvs.make_venv(self.path / name, wheel, wrapt=wrapt, test_deps=test_deps)
            except (subprocess.SubprocessError, OSError) as error:
                print(f"bench: cannot make venv {name} ({error}); skipping what needs it", file=sys.stderr)
                self._venvs[name] = None
        return self._venvs[name]


def has_fsguard_locks(python: Path) -> bool:
    """Whether the serialization backend (``fsguard.locks``, FSGUARD_SERIALIZE=1) exists in ``python``."""
    code = "import fsguard.locks as l, sys; sys.exit(0 if hasattr(l, 'serializer') else 1)"
    return subprocess.run([str(python), "-c", code], env=clean_env(), capture_output=True).returncode == 0


# --- statistics ---------------------------------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    data = list(values)
    return statistics.median(data) if data else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), nearest-rank on sorted data."""
    data = sorted(values)
    if not data:
        return float("nan")
    k = max(0, min(len(data) - 1, round(q / 100 * (len(data) - 1))))
    return data[k]


# --- output -------------------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain-text table, first column left-aligned and the rest right-aligned."""
    text_rows = [[str(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in text_rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=False))
        )

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in text_rows)])


def fmt(value: float | None, unit: str = "", digits: int = 2) -> str:
    if value is None or value != value:
        return "n/a"
    return f"{value:.{digits}f}{unit}"


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")


__all__ = [
    "ROOT",
    "TORCHRUN_ENV",
    "Workspace",
    "clean_env",
    "fmt",
    "has_fsguard_locks",
    "machine",
    "machine_line",
    "median",
    "percentile",
    "table",
    "write_json",
]
