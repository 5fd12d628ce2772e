"""Singleflight under store serialization (fsguard.locks.flight): many ranks making one identical call cost one
filesystem operation; a genuine error stays each rank's own error; different calls are not collapsed.

Real processes (fresh interpreters with fsguard from the wheel) against a real TCPStore standing in for the
launcher's agent store. No timings are asserted (bench/scale.py measures them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.conftest import clean_env
from tests.support.net import free_port
from tests.support.records import json_records as records

WORKER = Path(__file__).resolve().parent / "workers" / "singleflight_rank.py"


def _storm(
    python: Path,
    tmp_path: Path,
    port: int,
    ops: list[str],
    target: Path,
    extra: dict[str, str] | None = None,
    strace: bool = False,
) -> tuple[list[dict[str, Any]], Path]:
    logs = tmp_path / "logs"
    gate = tmp_path / "gate"
    env = {
        "FSGUARD": "1",
        "FSGUARD_SERIALIZE": "1",
        "FSGUARD_LOCK": "store",
        "FSGUARD_STDERR": "0",
        "FSGUARD_LOG": str(logs),
        "WORLD_SIZE": str(len(ops)),
        "TORCHELASTIC_RUN_ID": "test",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        **(extra or {}),
    }
    procs = [
        subprocess.Popen(
            (["strace", "-f", "-c", "-e", "trace=unlinkat", "-o", f"{gate}.strace{rank}"] if strace else [])
            + [str(python), str(WORKER), op, str(target), str(gate)],
            env=clean_env(dict(env, RANK=str(rank), LOCAL_RANK=str(rank))),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank, op in enumerate(ops)
    ]
    deadline = time.monotonic() + 300
    while not all(os.path.exists(f"{gate}.ready{r}") for r in range(len(ops))):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "a rank did not start"
        time.sleep(0.05)
    gate.touch()
    answers = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        answers.append(json.loads(out.strip().splitlines()[-1]))
    return answers, logs


def test_32_ranks_one_makedirs_reach_the_filesystem_about_once(
    fsguard_python: Path, tmp_path: Path, store_port: int
) -> None:
    target = tmp_path / "results"
    answers, logs = _storm(fsguard_python, tmp_path, store_port, ["makedirs"] * 32, target)
    assert all(a["ok"] for a in answers), answers
    assert target.is_dir()
    found = [r for r in records(logs) if r["args"] == [str(target)]]
    assert not [r for r in found if r["decision"] not in ("shared", "absorbed")], found
    shared = sum(r["detail"]["ranks"] for r in found if r["decision"] == "shared")
    performed = 32 - shared  # a rank that shared an outcome made no filesystem call
    assert 1 <= performed <= 8, found
    # every rank that performed and found the directory made by a peer says so, and nobody else does
    assert len([r for r in found if r["decision"] == "absorbed"]) == performed - 1, found


def test_a_genuine_error_is_each_ranks_own(fsguard_python: Path, tmp_path: Path, store_port: int) -> None:
    target = tmp_path / "old"
    target.write_text("a file, not a directory")  # a genuine FileExistsError, never a peer's race
    answers, logs = _storm(fsguard_python, tmp_path, store_port, ["makedirs"] * 8, target)
    assert all(a == {"ok": False, "type": "FileExistsError", "errno": 17, "filename": str(target)} for a in answers), (
        answers
    )
    assert not [r for r in records(logs) if r["decision"] == "absorbed"]


def test_different_calls_are_not_collapsed(fsguard_python: Path, tmp_path: Path, store_port: int) -> None:
    from fsguard.locks.flight import flight_key

    target = tmp_path / "results"
    one = flight_key("makedirs", [str(target)], (str(target),), {}, "node1")
    assert one == flight_key("makedirs", [str(target)], (str(target),), {}, "node1")
    assert one != flight_key("makedirs", [str(target)], (str(target),), {"exist_ok": True}, "node1")
    assert one != flight_key("makedirs", [str(target)], (str(target),), {}, "node2")  # tmp_path: node-local
    assert flight_key("makedirs", [str(target)], (str(target), 0o777, object()), {}, "node1") is None
    # Mixed calls on one path: each makes (or shares) its own kind, and all end as without fsguard.
    answers, _ = _storm(fsguard_python, tmp_path, store_port, ["makedirs", "makedirs_exist_ok"] * 4, target)
    assert all(a["ok"] for a in answers), answers
    assert target.is_dir()


def test_default_mode_rmtree_storm_removes_each_entry_about_once(fsguard_python: Path, tmp_path: Path) -> None:
    # 16 ranks rmtree one 210-entry tree, FSGUARD=1 without serialization: a rank that meets entries vanishing
    # under it (a peer removes the same tree) waits for the tree to go instead of racing it entry by entry.
    tree = tmp_path / "scratch"
    for i in range(10):
        (tree / f"d{i}").mkdir(parents=True)
        for j in range(20):
            (tree / f"d{i}" / f"f{j}").write_bytes(b"x")
    ranks = 16
    strace = shutil.which("strace") is not None
    extra = {"FSGUARD_SERIALIZE": "0", "FSGUARD_SETTLE_S": "20"}  # generous: a loaded machine is slow
    answers, logs = _storm(fsguard_python, tmp_path, free_port(), ["rmtree"] * ranks, tree, extra, strace)
    assert all(a["ok"] for a in answers), answers
    assert not tree.exists()
    assert not [r for r in records(logs) if r["decision"] in ("conflict", "unserialized")]
    if strace:
        calls = 0
        for rank in range(ranks):
            for line in Path(f"{tmp_path / 'gate'}.strace{rank}").read_text().splitlines():
                fields = line.split()
                if fields and fields[-1] == "unlinkat":
                    calls += int(fields[3])
        # each entry once, and at most a few failed attempts per rank (today's walk: up to ranks x 210)
        assert calls <= 210 + 4 * ranks, calls
