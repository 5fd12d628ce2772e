"""Never worse (issue 34): a path through a symlink followed by ``..`` means what the kernel resolves.

``latest/../cache`` with ``latest`` a link to ``runs/run-3`` is ``runs/cache``; folding it lexically to
``cache`` (a path that does not exist) made ``rmtree`` return having removed nothing, with a false "moved by a
peer" hazard, and made this process's own directory and move look like a peer's (absorbed where the program
would have stopped). Each program (``tests/workers/paths_as_given.py``) runs in both ranks of a 2-rank job
(real processes, the launcher's environment, the defaults a user gets), each rank in its own directory, with
and without fsguard: the exception, what it did and the files left must be the same, and fsguard writes no
record.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.ranks import launch, rank_env
from tests.support.records import from_lines

WORKER = Path(__file__).resolve().parent / "workers" / "paths_as_given.py"
RANKS = 2


def run_job(python: Path, case: str, root: Path, fsguard: str) -> tuple[list[object], list[str]]:
    root.mkdir(parents=True)
    envs = [rank_env(rank, RANKS, "paths", FSGUARD=fsguard) for rank in range(RANKS)]
    ranks = launch([str(python), str(WORKER), case, str(root)], envs, 120)
    assert all(r.code == 0 for r in ranks), [r.err[-3000:] for r in ranks]
    return [r.report() for r in ranks], [r.err for r in ranks]


@pytest.mark.parametrize(
    ("case", "expected_error"),
    [("rmtree", None), ("makedirs", ["FileExistsError", 17]), ("replace", ["FileNotFoundError", 2])],
)
def test_a_path_through_a_symlink_and_dotdot_ends_as_without_fsguard(
    fsguard_python: Path, tmp_path: Path, case: str, expected_error: list[object] | None
) -> None:
    without, _ = run_job(fsguard_python, case, tmp_path / "off", "0")
    with_fsguard, errs = run_job(fsguard_python, case, tmp_path / "on", "1")
    assert [o["error"] for o in without] == [expected_error] * RANKS, without  # type: ignore[index]
    assert with_fsguard == without, (with_fsguard, without)
    records = [r for err in errs for r in from_lines(err.splitlines(), only_records=True)]
    assert not records, [r.to_line() for r in records]
