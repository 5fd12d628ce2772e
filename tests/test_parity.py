"""Parity with the standard library on bad input: outside races, fsguard must change nothing.

Every row of the bad-input table (``tests/workers/parity_cases.py``) runs in a fresh interpreter of the
installed wheel with ``FSGUARD=force`` and with ``FSGUARD=0``; the outcomes must be identical: the same
exception (type, errno, strerror, filename, filename2 and their types, args, message, no context or cause,
the same frames in the worker, raised at the call under test) or the same success, the same onerror/onexc
calls in the same order, and the same files afterwards. With force, no ``fsguard:`` record line is written
except where a row expects one: a ``conflict`` (directory renamed onto a non-empty directory, raised all
the same) or a documented deviation (README), where fsguard absorbs with an ``absorbed`` record.

All rows of a group run in one interpreter per mode (the four interpreters of ``main`` and ``nobody`` run
at once); the ``stale`` group's paths are made by an earlier process at least 1.5 s before its
interpreters start, which run with ``FSGUARD_FRESH_S=0`` so those paths are older than the job.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from fsguard.records import Record, parse_line
from tests.conftest import clean_env
from tests.workers import parity_cases as cases

WORKER = Path(cases.__file__).resolve()
MODES = {"force": {"FSGUARD": "force"}, "off": {"FSGUARD": "0"}}
GROUP_ENV = {
    "main": {"FSGUARD_SETTLE_S": "0.2"},
    "stale": {"FSGUARD_SETTLE_S": "0.2", "FSGUARD_FRESH_S": "0"},
    "nobody": {"FSGUARD_SETTLE_S": "0.2"},
}
# /proc's process start time can read up to ~1 s early (whole-second boot time): stay well clear of it.
STALE_AGE_S = 1.5
MARKER = "parity-row: "


def _worker(python: Path, command: str, group: str, base: Path, shm: str, env: dict[str, str]) -> dict[str, Any]:
    args = [str(python), str(WORKER), command, group, str(base)] + ([shm] if shm else [])
    done = subprocess.run(args, env=clean_env(env), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{command} {group} failed:\n{done.stderr}"
    if command == "prepare":
        return {}
    result: dict[str, Any] = json.loads(done.stdout)
    stderr: dict[str, list[str]] = {"<before any row>": []}
    current = "<before any row>"
    for line in done.stderr.splitlines():
        if line.startswith(MARKER):
            current = line[len(MARKER) :]
            stderr[current] = []
        else:
            stderr[current].append(line)
    result["stderr"] = stderr
    return result


@pytest.fixture(scope="module")
def outcomes(fsguard_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    """{mode: {"meta": ..., "rows": {row: outcome}, "stderr": {row: [lines]}}} over all groups."""
    root = tmp_path_factory.mktemp("parity")
    # nobody must reach its rows: pytest's own temporary root is private (0700), so use one of our own.
    shared = Path(tempfile.mkdtemp(prefix="fsguard-parity-", dir="/tmp"))
    shared.chmod(0o755)
    shm = tempfile.mkdtemp(prefix="fsguard-parity-", dir="/dev/shm") if os.path.isdir("/dev/shm") else ""
    bases = {
        (mode, group): (shared if group == "nobody" else root) / mode / group for mode in MODES for group in GROUP_ENV
    }
    for base in bases.values():
        base.mkdir(parents=True)
    shms = {mode: "" for mode in MODES}
    if shm:
        for mode in MODES:
            shms[mode] = os.path.join(shm, mode)
            os.mkdir(shms[mode])

    def env(mode: str, group: str) -> dict[str, str]:
        return {**MODES[mode], **GROUP_ENV[group]}

    try:
        for mode in MODES:
            _worker(fsguard_python, "prepare", "stale", bases[mode, "stale"], "", env("off", "stale"))
        prepared = time.monotonic()
        groups = [g for g in GROUP_ENV if g != "stale"] + ["stale"]
        if cases.NOBODY is None or os.getuid() != 0:
            groups.remove("nobody")
        with ThreadPoolExecutor(max_workers=len(MODES) * len(groups)) as pool:
            futures = {}
            for group in groups:
                if group == "stale":
                    time.sleep(max(0.0, prepared + STALE_AGE_S - time.monotonic()))
                for mode in MODES:
                    futures[mode, group] = pool.submit(
                        _worker, fsguard_python, "run", group, bases[mode, group], shms[mode], env(mode, group)
                    )
            done = {key: future.result() for key, future in futures.items()}
        merged: dict[str, dict[str, Any]] = {}
        for mode in MODES:
            merged[mode] = {"meta": {}, "rows": {}, "stderr": {}}
            for group in groups:
                part = done[mode, group]
                merged[mode]["meta"][group] = part["meta"]
                merged[mode]["rows"].update(part["rows"])
                merged[mode]["stderr"].update(
                    {f"{group}:{k}" if k.startswith("<") else k: v for k, v in part["stderr"].items()}
                )
        yield merged
    finally:
        shutil.rmtree(shared, ignore_errors=True)
        if shm:
            shutil.rmtree(shm, ignore_errors=True)


def _records(lines: list[str]) -> list[Record]:
    found = []
    for line in lines:
        assert line.startswith("fsguard: "), f"unexpected stderr line: {line!r}"
        record = parse_line(line)
        assert record is not None, f"an fsguard: line that is not a record: {line!r}"
        found.append(record)
    return found


def _params() -> list[Any]:
    params = []
    for name, item in cases.ROWS.items():
        marks = [pytest.mark.xfail(strict=True, reason=item.xfail)] if item.xfail else []
        params.append(pytest.param(name, marks=marks, id=name))
    return params


def test_worker_ran_every_row_patched_and_unpatched(outcomes: dict[str, dict[str, Any]]) -> None:
    for group, meta in outcomes["force"]["meta"].items():
        assert meta["patched"] == ["makedirs", "rename", "replace", "rmtree"], group
    for group, meta in outcomes["off"]["meta"].items():
        assert meta["patched"] == [], group
    if "nobody" in outcomes["force"]["meta"]:
        assert outcomes["force"]["meta"]["nobody"]["uid"] == outcomes["off"]["meta"]["nobody"]["uid"] != 0
    for mode in MODES:
        preambles = {k: v for k, v in outcomes[mode]["stderr"].items() if k.endswith("<before any row>")}
        assert len(preambles) == len(outcomes[mode]["meta"]) and not any(preambles.values()), preambles
        ran = set(outcomes[mode]["rows"])
        expected = {n for n, r in cases.ROWS.items() if r.group in outcomes[mode]["meta"]}
        assert ran == expected


@pytest.mark.parametrize("name", _params())
def test_row(outcomes: dict[str, dict[str, Any]], name: str) -> None:
    item = cases.ROWS[name]
    if item.group not in outcomes["off"]["meta"]:
        pytest.skip(f"group {item.group!r} cannot run here (needs root and a 'nobody' user)")
    force, off = outcomes["force"]["rows"][name], outcomes["off"]["rows"][name]
    if "skip" in off or "skip" in force:
        assert force == off
        pytest.skip(off["skip"])

    # The scenario tests what it claims: the standard library's outcome, raised by the call under test.
    if item.outcome is not None:
        assert (off["exc"]["type"].rsplit(".", 1)[-1] if not off["ok"] else "ok") == item.outcome, off
    if not off["ok"]:
        assert cases.CALL_MARK in (off["exc"]["failing_line"] or ""), off["exc"]
        assert off["exc"]["context"] is None and off["exc"]["cause"] is None, off["exc"]
    if item.handler:
        assert off["calls"], "the handler was never called"
    assert outcomes["off"]["stderr"][name] == []  # off: no fsguard at all

    records = _records(outcomes["force"]["stderr"][name])
    if item.expect == "absorbed":
        # A documented deviation (README): the standard library raises, fsguard absorbs and says so.
        assert not off["ok"] and force["ok"] and force["result"] == "None", force
        assert force["state"] == off["state"]
        assert [r.decision for r in records] == ["absorbed"]
        assert records[0].op in name and records[0].error and records[0].error["type"] == item.outcome
        return

    differing = {
        key: {"force": force.get(key), "off": off.get(key)}
        for key in force.keys() | off.keys()
        if force.get(key) != off.get(key)
    }
    assert not differing, json.dumps(differing, indent=1)
    if item.expect == "conflict":
        assert [r.decision for r in records] == ["conflict"], records
        (record,) = records
        assert record.op == name.split("_", 1)[0]
        assert record.error is not None and record.error["errno"] in ("ENOTEMPTY", "EEXIST")
        assert len(record.args) == 2 and record.args[1].endswith(os.sep + "b")
    else:
        assert records == [], [r.to_line() for r in records]
