"""Tests side by side (issue 48): ``scripts/test.sh`` runs pytest with pytest-xdist workers, ``--dist loadgroup``.

* Which tests go together (``group``): a test using a module- or class-scoped fixture of this suite runs in the
  worker that runs the rest of its module (per parameter of those fixtures: ``tests/test_versions.py`` is one
  group per CPython version), so the fixture is still made once; a test using a session-scoped fixture of the
  suite that is not shared between workers (a started service: ``slurm``) runs in that fixture's one worker;
  a test with a parameter naming a machine-wide service (``SERVICE_PARAMS``: GlusterFS's one ``glusterd``)
  runs in that service's worker; every other test is its own unit, sent to whichever worker is free. A test module may name its own group with
  ``@pytest.mark.xdist_group("name")`` (tests that must not run beside each other: one group runs in order).
* Which go first (``order``): slow tests (the marked multi-node, launcher, real-program and stdlib tests, then
  the slow modules: the other CPython versions, the benchmarks, the long jobs) are handed out first, groups before
  single tests, so the last minutes are not one worker finishing a long test while the other idles.
* What the workers share (``once``): the wheel and the venvs of ``tests/conftest.py`` are built by the first
  worker that asks, under a file lock in the run's base directory, and reused by the others.
* Coverage (``start_coverage``): ``coverage run`` (scripts/test.sh) measures the controller only; a worker
  starts its own from ``COVERAGE_PROCESS_START`` before fsguard is imported, and saves it at its end.

How the groups reach xdist: pytest-xdist 3.8 marks a grouped test by appending ``@group`` to its node id, which
pytest 9.2's node ids no longer take; so each worker writes the groups of its collection to the run's base
directory (``publish``) and the controller schedules by them (``make_scheduler``: xdist's loadgroup scheduling,
reading the group of a node id from there).

Without ``-n`` (a plain ``pytest`` run) nothing changes: one process, nothing grouped or shared.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1"... in an xdist worker; None otherwise

# Session fixtures of the suite every worker may have its own of (cheap, or built once through ``once``).
PER_WORKER_SESSION = frozenset({"wheel", "fsguard_python", "bare_python", "store_port"})
# Parameters that name a machine-wide service: every test with one runs in one worker, in turn. GlusterFS volumes
# are served by the machine's one glusterd, which a test starts and stops (tests/cluster/backends.py). JuiceFS's
# clients keep a socket for handing their FUSE descriptor over at /tmp/fuse_fd_comm.<pid>, and a simulated node's
# client has the same small pid in every cluster (pid namespaces): two clusters' clients at once may find each
# other's socket. Seen once (2026-12-06, 46da5d6): two JuiceFS tests on the two workers, one volume's entry in the
# other's listing and "Get directory parent of inode 4098" in its log. So their tests run in turn, too.
SERVICE_PARAMS = {("backend", "glusterfs"): "glusterd", ("backend", "juicefs"): "juicefs-fd-sockets"}
# Markers of slow tests (pyproject.toml): handed out first. Then the slow modules': the other CPythons' groups, the
# benchmarks' one group (about 7 minutes of one worker), and the modules whose tests run jobs of a minute or more
# each (measured in a whole run, issue 48): handed out last, they were the run's tail, one worker idle.
SLOW_MARKERS = ("cluster", "launchers", "real", "stdlib", "fuse")
SLOW_MODULES = (
    "tests/test_versions.py",
    "tests/test_bench.py",
    "tests/test_singleflight.py",
    "tests/test_serialize.py",
    "tests/test_rename_wins.py",
    "tests/test_fork.py",
    "tests/test_never_worse_identity.py",
)


def start_coverage() -> Any:
    """In an xdist worker under ``scripts/test.sh``: coverage started from ``COVERAGE_PROCESS_START``, the
    ``Coverage`` returned (saved by ``save_coverage``); None elsewhere."""
    if WORKER is None or not os.environ.get("COVERAGE_PROCESS_START"):
        return None
    import coverage

    if coverage.Coverage.current() is not None:
        return None
    return coverage.process_startup()


def save_coverage(cov: Any) -> None:
    if cov is not None:
        cov.stop()
        cov.save()
        cov._auto_save = False  # saved: coverage's own exit hook need not save again


def once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Path]) -> Path:
    """``build(where)``'s result, built once per run for every worker (the first to ask builds it, holding a
    lock; the others wait and reuse it); in a plain run, once in this process (under its base directory)."""
    from filelock import FileLock

    base = factory.getbasetemp()
    root = (base.parent if WORKER else base) / "built-once" / name  # xdist: each worker's base is popen-gwN/
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{root}.lock"):
        done = root.parent / f"{name}.done"
        if done.exists():
            return Path(done.read_text())
        root.mkdir(exist_ok=True)
        result = build(root)
        done.write_text(str(result))
        return result


def group(item: pytest.Item) -> str | None:
    """The unit ``item`` is handed out with (see the module's text), or None: on its own."""
    marked = {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
    if marked:
        return "_".join(sorted(marked))  # as xdist names it
    info = getattr(item, "_fixtureinfo", None)
    params = getattr(getattr(item, "callspec", None), "params", {})
    services = [service for (name, value), service in SERVICE_PARAMS.items() if params.get(name) == value]
    scoped: list[str] = []
    for name, defs in info.name2fixturedefs.items() if info is not None else ():
        fixture = defs[-1]
        if not fixture.baseid:  # pytest's or a plugin's own (tmp_path_factory, worker_id...)
            continue
        if fixture.scope == "session" and name not in PER_WORKER_SESSION:
            services.append(name)
        elif fixture.scope in ("module", "class", "package"):
            scoped.append(f"{name}={params[name]}" if name in params else name)
    if services:
        return "session:" + ",".join(sorted(services))
    if scoped:
        module = item.nodeid.split("::")[0]
        name = "/".join([module, *sorted(p for p in scoped if "=" in p)])
        return name.replace("[", "(").replace("]", ")")  # xdist reads a group only after a nodeid's last "]"
    return None


def _rank(item: pytest.Item) -> int:
    if any(item.get_closest_marker(m) for m in SLOW_MARKERS):
        return 0
    return 1 if item.nodeid.split("::")[0] in SLOW_MODULES else 2


GROUPS_FILE = "xdist-groups.json"


def publish(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a worker: the group of each collected test, for the controller's scheduler (written whole, then
    renamed: every worker collects the same tests, and writes the same file)."""
    if WORKER is None:
        return
    groups = {item.nodeid: name for item in items if (name := group(item)) is not None}
    where = config._tmp_path_factory.getbasetemp().parent / GROUPS_FILE  # type: ignore[attr-defined]
    partial = where.with_name(f"{GROUPS_FILE}.{WORKER}")
    partial.write_text(json.dumps(groups))
    os.replace(partial, where)


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The controller's scheduler for ``--dist loadgroup``: xdist's, with each test's group read from what the
    workers published; None (xdist's own) for another ``--dist``."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    where = config._tmp_path_factory.getbasetemp() / GROUPS_FILE  # type: ignore[attr-defined]

    class Grouped(LoadGroupScheduling):  # type: ignore[misc]
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                self.groups = json.loads(where.read_text()) if where.exists() else {}
            found = self.groups.get(nodeid)
            return f"group:{found}" if found is not None else str(super()._split_scope(nodeid))

    return Grouped(config, log)


def order(items: list[pytest.Item]) -> None:
    """Mark each item with its group, and put the slow ones first; a group's items stay together, in order.
    Of equally slow ones, groups go before single tests: the largest units first, the small ones fill in."""
    groups: dict[str, int] = {}
    named: list[tuple[pytest.Item, str | None]] = [(item, group(item)) for item in items]
    for item, name in named:
        if name is not None:
            if item.get_closest_marker("xdist_group") is None:
                item.add_marker(pytest.mark.xdist_group(name))
            groups[name] = min(groups.get(name, 2), _rank(item))
    first_seen = {name: i for i, (_, name) in reversed(list(enumerate(named))) if name is not None}
    keyed = [
        ((groups[name], 0, first_seen[name]) if name is not None else (_rank(item), 1, i), i, item)
        for i, (item, name) in enumerate(named)
    ]
    items[:] = [item for _, _, item in sorted(keyed, key=lambda k: (k[0], k[1]))]
