"""Parity with the standard library on bad input: outside races, fsguard must change nothing.

Every row of the bad-input table (``tests/workers/parity_cases.py``) runs in a fresh interpreter of the
installed wheel in three modes: ``FSGUARD=force`` (no launcher: no peers), in a launched rank (``FSGUARD=1`` with
a torchrun job's variables: peers present, a job tag, no peer acting; issue 45) and ``FSGUARD=0``. The outcomes
of each guarded mode and of ``0`` must be identical: the same exception (type, errno, strerror, filename,
filename2 and their types, args, message, no context or cause, the same frames in the worker, raised at the call
under test) or the same success, the same onerror/onexc calls in the same order, and the same files afterwards
(their extended attributes included). No record is written except where a row expects one: a ``conflict``
(directory renamed onto a non-empty directory, raised all the same), a documented deviation (README), where
fsguard absorbs with an ``absorbed`` record, and that deviation's scenario under the program's own handler
(``<row>_handled``), where fsguard hands the error over with a ``deferred`` record. In a launched rank such a
deviation is allowed, not owed: the standard library's outcome with no record passes too (a job's identity may
tell a scenario's unguarded "peer" from a peer of the job). A row's records are read
from ``FSGUARD_LOG`` (stderr's are rate-limited per call site); its stderr holds nothing but records.

All rows of a group run in one interpreter per mode (the interpreters of ``main`` and ``nobody`` run
at once); the ``stale`` group's paths are made by an earlier process more than the default
``FSGUARD_FRESH_S`` (plus 1.5 s) before its interpreters start, so those paths are older than the job with the
defaults a user gets (the launched worker starts through a stand-in for torchrun's agent, whose start is the
job's).

The run and the checks live in ``tests/parity_support.py``, shared with ``tests/test_versions.py``, which
runs the same table under the other CPython versions found on the machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import parity_support as parity


@pytest.fixture(scope="module")
def outcomes(fsguard_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[parity.Outcomes]:
    """{mode: {"meta": ..., "rows": {row: outcome}, "stderr": {row: [lines]}}} over all groups."""
    with parity.collect(fsguard_python, tmp_path_factory.mktemp("parity")) as merged:
        yield merged


def test_worker_ran_every_row_patched_and_unpatched(outcomes: parity.Outcomes) -> None:
    parity.check_meta(outcomes)


@pytest.mark.parametrize("name", parity.row_params())
def test_row(outcomes: parity.Outcomes, name: str) -> None:
    parity.check_row(outcomes, name)


@pytest.mark.parametrize("name", parity.row_params(mode="launched"))
def test_row_launched(outcomes: parity.Outcomes, name: str) -> None:
    """The same row in a launched rank (``FSGUARD=1``, a torchrun job's variables, no peer acting)."""
    parity.check_row(outcomes, name, mode="launched")
