"""Never worse (issue 34): an ``rmtree`` never removes an entry that appeared after its walk listed the directory.

A rank evicts a cache while its peer publishes a new entry into it (``tests/workers/cache_eviction.py``; real
processes, the launcher's environment, the defaults a user gets). Without fsguard the walk's ``rmdir`` fails
with ``ENOTEMPTY``: the best-effort eviction swallows it, a logging handler logs it, a program without a
handler stops, and in every case the peer's entry survives and the peer reads it. With fsguard each ends the
same: the error goes where the standard ``rmtree`` sends it, nothing is retried and no record says it was.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.ranks import launch, rank_env
from tests.support.records import from_lines

WORKER = Path(__file__).resolve().parent / "workers" / "cache_eviction.py"


def run_job(python: Path, case: str, root: Path, fsguard: str) -> tuple[list[dict[str, object]], list[str]]:
    root.mkdir(parents=True)
    envs = [rank_env(rank, 2, "eviction", FSGUARD=fsguard) for rank in range(2)]
    ranks = launch([str(python), str(WORKER), case, str(root)], envs, 120)
    assert all(r.code == 0 for r in ranks), [r.err[-3000:] for r in ranks]
    return [r.report() for r in ranks], [r.err for r in ranks]


@pytest.mark.parametrize("case", ["suppress", "shared", "onerror", "crash"])
def test_a_peers_new_entry_survives_an_eviction_as_without_fsguard(
    fsguard_python: Path, tmp_path: Path, case: str
) -> None:
    without, _ = run_job(fsguard_python, case, tmp_path / "off", "0")
    evictor, publisher = without
    assert evictor["published_in_time"] and publisher["saw_eviction"], without  # the race happened
    assert publisher["read"] == "published" and "shard/new" in evictor["left"], without  # its entry survived
    assert evictor["error"] == (["OSError", 39] if case == "crash" else None), without
    with_fsguard, errs = run_job(fsguard_python, case, tmp_path / "on", "1")
    assert with_fsguard == without, (with_fsguard, without)
    records = [r for err in errs for r in from_lines(err.splitlines(), only_records=True)]
    assert not [r for r in records if r.decision == "absorbed"], [r.to_line() for r in records]
