"""The standard call's contract in a launched rank (issue 45): ``shutil.rmtree`` with ``onerror``/``onexc`` or
``ignore_errors`` ends as without fsguard, whatever stands around the call.

Three ranks with a launcher's variables (peers present: the yield window, the checks, the absorbing rules all on)
run ``tests/workers/rmtree_contract.py`` without fsguard and with ``FSGUARD=1``: a directory that is not there, a
tree a peer removed, entries a peer removed, each bare (an error would end the process), under a framework's
``except Exception: log`` and in a ``ThreadPoolExecutor`` future; and the issue's three programs (an optional tmp
dir removed in an end-of-epoch callback, two ranks cleaning one staging directory, a checkpoint rotation in an
executor with ``onerror=lambda *a: None``). The handler must see the same calls (function, path, exception, in
order), and fsguard must raise nothing the standard ``rmtree`` would not. ``onexc`` rows run where ``rmtree``
takes it (3.12+: also under ``tests/test_versions.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.ranks import launch, rank_env

WORKER = Path(__file__).resolve().parent / "workers" / "rmtree_contract.py"
RANKS = 3
CASES = ["missing", "removed", "entries"]
WRAPS = ["none", "except", "executor"]
HANDLERS = ["onerror", "onexc", "ignore"]
PROGRAMS = [("callback", "except", "onerror"), ("staging", "none", "onerror"), ("staging", "except", "onerror")]
PROGRAMS += [("rotation", "none", "onerror")]


def takes_onexc(python: Path) -> bool:
    import subprocess

    code = "import shutil, sys; sys.exit(0 if 'onexc' in shutil.rmtree.__code__.co_varnames else 1)"
    return subprocess.run([str(python), "-c", code], check=False).returncode == 0


def run_job(python: Path, where: Path, case: str, wrap: str, handler: str, fsguard: str) -> list[dict[str, Any]]:
    """Each rank's ending: its exit status, the handler calls it printed, its final line, the error that ended it."""
    root = where / fsguard
    (root / "gate").mkdir(parents=True)
    env = {"FSGUARD": fsguard, "FSGUARD_LOG": str(where / f"log-{fsguard}")}
    envs = [rank_env(rank, RANKS, f"contract-{fsguard}", **env) for rank in range(RANKS)]
    ranks = launch([str(python), str(WORKER), case, wrap, handler, str(root)], envs, 120)
    endings = []
    for rank in ranks:
        lines = [json.loads(line) for line in rank.out.splitlines() if line.startswith(("[", "{"))]
        done = [line["done"] for line in lines if isinstance(line, dict)]
        error = [line for line in rank.err.splitlines() if line and not line.startswith((" ", "fsguard: "))]
        ended = error[-1].split(":")[0] if rank.code else None  # the exception that ended the process
        calls = [line for line in lines if isinstance(line, list)]
        endings.append({"code": rank.code, "calls": calls, "done": done, "ended": ended})
    return endings


def compare(python: Path, where: Path, case: str, wrap: str, handler: str) -> list[dict[str, Any]]:
    without = run_job(python, where, case, wrap, handler, "0")
    with_fsguard = run_job(python, where, case, wrap, handler, "1")
    if case == "staging":  # who came first decides which rank's handler saw what: the job's kinds are compared
        for endings in (without, with_fsguard):
            kinds = sorted({k for e in endings for d in e["done"] for k in d.pop("kinds")})
            for e in endings:
                e["calls"] = kinds
    elif case == "rotation":
        for endings in (without, with_fsguard):
            for e in endings:
                e["calls"] = []
    assert with_fsguard == without, (with_fsguard, without)
    return without


def check(python: Path, where: Path, case: str, wrap: str, handler: str) -> None:
    if handler == "onexc" and not takes_onexc(python):
        pytest.skip("shutil.rmtree has no onexc before Python 3.12")
    endings = compare(python, where, case, wrap, handler)
    if handler == "ignore" or case == "rotation":
        assert all(e["code"] == 0 and e["done"] and e["done"][0]["caught"] in ([], [None], [None] * 4) for e in endings)
    elif case in ("missing", "callback", "removed"):
        callers = endings if case != "removed" else endings[1:]
        assert all(e["calls"] and e["calls"][0][3] == "FileNotFoundError" for e in callers), endings


@pytest.mark.parametrize("handler", HANDLERS)
@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("case", CASES)
def test_rmtree_with_a_handler_ends_as_without_fsguard(
    fsguard_python: Path, tmp_path: Path, case: str, wrap: str, handler: str
) -> None:
    check(fsguard_python, tmp_path, case, wrap, handler)


@pytest.mark.parametrize(("program", "wrap", "handler"), PROGRAMS)
def test_the_issues_programs_end_as_without_fsguard(
    fsguard_python: Path, tmp_path: Path, program: str, wrap: str, handler: str
) -> None:
    check(fsguard_python, tmp_path, program, wrap, handler)
