"""Programs that claim a name by the failure of a guarded call keep working: fsguard defers to their handler.

4 real ranks (fresh interpreters of the wheel's venv, a torchrun environment each, ``workers/claim_worker.py``)
run 20 rounds of one claim idiom, meeting at a file barrier before each round. Without fsguard, no two ranks
ever hold the same name and nothing crashes (the test's premise, with the race really happening: the ranks'
handlers see lost claims). With ``FSGUARD=1`` the outcome must be the same: no shared name, no crash, every
exclusive claim held by exactly one rank, and each failure fsguard's evidence would have absorbed recorded as
``deferred``, naming the handler that got it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fsguard.records import Record, parse_line
from tests.support.ranks import launch, rank_env

RANKS = 4
ROUNDS = 20
WORKER = Path(__file__).resolve().parent / "workers" / "claim_worker.py"
JOB_TIMEOUT_S = 180

# idiom -> (exclusive: one owner per round, the others None; handler label the deferred records name)
IDIOMS: dict[str, tuple[bool, str | None]] = {
    "sequential": (False, "except FileExistsError"),
    "parsl": (False, "except FileExistsError"),  # the driver's, past make_rundir's log-and-re-raise
    "parsl_retry": (False, "except FileExistsError"),
    "py2": (False, "except OSError"),
    "mkdir_lock": (True, "except FileExistsError"),
    "helper": (False, "except FileExistsError"),
    "rename_lock": (True, None),  # the rename rule never absorbs a move onto a new name: nothing to defer
}


@dataclass
class Job:
    reports: list[dict[str, Any]]
    records: list[Record]


def run_job(python: Path, idiom: str, where: Path, guarded: bool) -> Job:
    root = where / "root"
    (root / "gate").mkdir(parents=True)
    envs = [rank_env(rank, RANKS, f"claims-{idiom}", FSGUARD="1" if guarded else "0") for rank in range(RANKS)]
    ranks = launch([str(python), str(WORKER), idiom, str(root), str(ROUNDS)], envs, JOB_TIMEOUT_S)
    stderr = [r.err for r in ranks]
    assert [r.code for r in ranks] == [0] * RANKS, stderr
    lines = [line for text in stderr for line in text.splitlines()]
    assert all(line.startswith("fsguard: ") for line in lines), lines
    records = [parse_line(line) for line in lines]
    assert all(isinstance(r, Record) for r in records), lines
    reports = [r.report() for r in ranks]
    return Job(reports, [r for r in records if r is not None])


def check_claims(job: Job, idiom: str) -> None:
    """No crash, no name held by two ranks in a round, and an exclusive claim held by exactly one rank."""
    exclusive = IDIOMS[idiom][0]
    assert [r["crashes"] for r in job.reports] == [[]] * RANKS, job.reports
    for k in range(ROUNDS):
        held = [r["claims"][k] for r in job.reports if r["claims"][k] is not None]
        assert len(held) == len(set(held)), f"round {k}: two ranks hold one name: {held}"
        assert len(held) == (1 if exclusive else RANKS), f"round {k}: {held}"


@pytest.mark.parametrize("idiom", IDIOMS)
def test_claim_idiom_keeps_working_with_fsguard(fsguard_python: Path, tmp_path: Path, idiom: str) -> None:
    check_claim_idiom(fsguard_python, tmp_path, idiom)


def check_claim_idiom(fsguard_python: Path, tmp_path: Path, idiom: str) -> None:
    """The idiom's claims are lost without fsguard, stay exclusive with it, and lost claims are deferred to
    the idiom's own handler (also run under other Python versions by ``tests/test_versions.py``)."""
    for attempt in range(3):  # until the race happened: on a loaded machine 20 rounds may all go one way
        without = run_job(fsguard_python, idiom, tmp_path / f"without{attempt}", guarded=False)
        check_claims(without, idiom)
        lost_without = sum(r["lost"] for r in without.reports)
        if lost_without:
            break
    assert lost_without, f"{idiom}: no claim was ever lost in 3 x {ROUNDS} rounds: the race never happened"
    assert without.records == []

    guarded = run_job(fsguard_python, idiom, tmp_path / "with", guarded=True)
    check_claims(guarded, idiom)
    lost = sum(r["lost"] for r in guarded.reports)
    print(f"{idiom}: lost claims without fsguard {lost_without}, with {lost}; records {len(guarded.records)}")
    handler = IDIOMS[idiom][1]
    # stderr shows a few lines per call site; the last stands for those held back (``detail.more``)
    decisions = Counter({d: 0 for d in {r.decision for r in guarded.records}})
    for r in guarded.records:
        decisions[r.decision] += 1 + int(r.detail.get("more", 0))
    if handler is None:
        assert guarded.records == [], [r.to_line() for r in guarded.records]
        return
    # Each deferral is a lost claim fsguard would have absorbed (a peer's fresh directory), gone to the handler. A claim
    # lost to a peer whose journal note had not landed yet (its one write after the mkdir) is no peer's that fsguard
    # can tell: where the caller gets the error anyway it does not wait for the note, and leaves the error unrecorded
    # (seen: 117-119 of 120, once a failure stopped reading every journal of the node).
    assert set(decisions) <= {"deferred"} and lost / 2 <= decisions["deferred"] <= lost, (decisions, lost)
    for record in guarded.records:
        assert record.op == "makedirs" and record.error and record.error["type"] == "FileExistsError"
        assert record.detail["handler"] == handler, record.detail
        assert record.detail["frame"].startswith(str(WORKER) + ":"), record.detail
        assert "peer" in record.evidence
        if idiom == "helper":
            assert record.detail["frames_up"] == 2
