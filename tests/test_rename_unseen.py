"""A peer's replace of a shared temp name lands while this node's own replace is on its way to the server.

Two bindfs views of one backing directory, each caching lookups (positive and negative) for ``CACHE_S``:
view A is the peer's node, view B this process's. This process (a rank of a job, on B) wrote the shared
``latest.tmp`` and replaces it onto ``latest``. Its kernel looks ``latest`` up (missing: cached as missing),
and before its rename reaches the server the peer's replace of ``latest.tmp`` onto ``latest`` lands; the
rename then fails with ``ENOENT``, and the peer writes ``latest.tmp`` again. Now B's fresh listing shows
``latest`` (and ``latest.tmp`` again) while B's lookups say ``latest`` is missing until the cache lets go.

The rule used to re-raise that ("not yet visible to this node's lookups: cannot tell whose it is"): with the
source back, a stale "missing" of the source could also explain the failure, and only the destination's
ctime can tell a peer's move during this job from an older file. It now waits, within ``FSGUARD_SETTLE_S``,
for B's lookup to show the destination and applies the same test as to a visible one.

Deterministic: the peer's two steps are made with the unguarded ``posix`` functions through view A at the
exact moments, from an audit hook (just before B's rename: the peer takes ``latest.tmp``) and a profile hook
(as the rename fails: the peer's replace lands, and it writes ``latest.tmp`` again).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.fixtures import needs_fuse, stale_views
from tests.conftest import TORCHRUN_ENV, run_python
from tests.support.records import from_lines
from tests.support.threads import with_crash_of

pytestmark = [pytest.mark.fuse, needs_fuse]

CACHE_S = 3.0  # B's "missing" answer for latest outlives the decision's first look, and not the settle budget
SETTLE_S = 20.0  # a bound, not a wait: the decision returns as soon as B's lookup shows the destination

WORKER = """
    import os, posix, sys
    a, b = os.environ["VIEW_A"], os.environ["VIEW_B"]
    temp, latest = os.path.join(b, "latest.tmp"), os.path.join(b, "latest")
    held = os.path.join(a, ".peer-in-flight")
    with open(temp, "w") as f:
        f.write("this rank's step\\n")
    steps = []

    def peer_takes_the_temp(event, args):  # audit hook: just before this process's rename system call
        if event == "os.rename" and not steps and os.fspath(args[0]) == temp:
            steps.append("taken")
            posix.rename(os.path.join(a, "latest.tmp"), held)

    def peer_lands(frame, event, arg):  # profile hook: this process's rename has just failed
        if event == "c_exception" and steps == ["taken"] and getattr(arg, "__name__", "") == "replace":
            steps.append("landed")
            posix.rename(held, os.path.join(a, "latest"))  # the peer's replace of latest.tmp onto latest
            fd = posix.open(os.path.join(a, "latest.tmp"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            posix.write(fd, b"the peer's next step\\n")  # and it writes the shared temp name again
            posix.close(fd)

    def publish():
        sys.setprofile(peer_lands)  # (per thread)
        try:
            os.replace(temp, latest)  # guarded call: replace
        finally:
            sys.setprofile(None)

    sys.addaudithook(peer_takes_the_temp)
    # a thread of its own, no handler around the call: a would-be crash, fsguard decides
    _, escaped = crash_of(publish)
    outcome = type(escaped).__name__ if escaped else "published"
    listed = sorted(n for n in os.listdir(b) if not n.startswith("."))
    print(outcome, steps, listed, "visible" if os.path.lexists(latest) else "not visible", sep="|")
    with open(os.path.join(a, "latest")) as f:
        print(f.read().strip())
"""

JOB = {**TORCHRUN_ENV, "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}


def run(python: Path, where: Path, fsguard: str) -> tuple[list[str], str]:
    with stale_views(where, cache_s=CACHE_S) as views:
        env = {**JOB, "FSGUARD": fsguard, "FSGUARD_SETTLE_S": str(SETTLE_S), "VIEW_A": str(views.a)}
        done = run_python(python, with_crash_of(WORKER), {**env, "VIEW_B": str(views.b)}, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines(), done.stderr


def test_without_fsguard_the_lost_replace_fails(fsguard_python: Path, tmp_path: Path) -> None:
    out, _ = run(fsguard_python, tmp_path, "0")
    # The race happened as described: failed, both names in B's listing, latest not in B's lookups yet.
    assert out[0] == "FileNotFoundError|['taken', 'landed']|['latest', 'latest.tmp']|not visible", out
    assert out[1] == "this rank's step", out  # the peer's replace published this rank's data


def test_with_fsguard_the_peers_replace_is_absorbed(fsguard_python: Path, tmp_path: Path) -> None:
    out, err = run(fsguard_python, tmp_path, "1")
    assert out[0] == "published|['taken', 'landed']|['latest', 'latest.tmp']|visible", (out, err)
    assert out[1] == "this rank's step", out
    [record] = from_lines(err.splitlines())
    # this rank wrote latest.tmp in place under the name the peer took: a hazard (issue 45), absorbed all the same
    assert (record.op, record.decision) == ("replace", "hazard"), record.to_line()
    assert "source re-published since by a peer, destination present and changed" in record.evidence, record.to_line()
    assert 0 < record.waited_s < SETTLE_S, record.to_line()  # it waited for B's lookup, not out the budget
