"""Parity with the standard library for ``remove``/``unlink``, ``mkdir``, ``symlink`` and ``link``.

The rows of ``tests/workers/parity_family.py`` run exactly as ``tests/test_parity.py`` runs its table (fresh
interpreters of the installed wheel, ``FSGUARD=force`` and a launched rank against ``FSGUARD=0``, groups
``main``, ``stale`` and ``nobody``), here with every operation guarded: every genuine error (never existed in a
directory untouched during the job, parent missing, points elsewhere, another inode, a directory in the way,
bytes and PathLike paths, EACCES/EPERM as ``nobody``) is raised exactly as without fsguard, with each parameter of each operation (``mode``, ``dir_fd``, ``target_is_directory``,
``src_dir_fd``/``dst_dir_fd``, ``follow_symlinks``, by keyword too); the documented deviations are absorbed with
one record (in a launched rank also a name missing from a directory changed moments ago), and handed to the
program's own handler with a ``deferred`` one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import parity_support as parity
from tests.workers import parity_family as table


@pytest.fixture(scope="module")
def outcomes(fsguard_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[parity.Outcomes]:
    with parity.collect(fsguard_python, tmp_path_factory.mktemp("parity-family"), table) as merged:
        yield merged


def test_worker_ran_every_row_patched_and_unpatched(outcomes: parity.Outcomes) -> None:
    parity.check_meta(outcomes, table)


@pytest.mark.parametrize("name", parity.row_params(table))
def test_row(outcomes: parity.Outcomes, name: str) -> None:
    parity.check_row(outcomes, name, table)


@pytest.mark.parametrize("name", parity.row_params(table, mode="launched"))
def test_row_launched(outcomes: parity.Outcomes, name: str) -> None:
    """The same row in a launched rank (``FSGUARD=1``, a torchrun job's variables, no peer acting)."""
    parity.check_row(outcomes, name, table, mode="launched")
