"""pytest glue for the simulated cluster: a factory fixture and the environment a job runs with.

Import the fixture into a test module (``from tests.cluster.fixtures import make_cluster``) to use it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import backends
from .harness import Cluster, bindfs_options, cluster, mounts_under, unavailable_reason

# Skip messages by backend: in CI (FSGUARD_TESTS_STRICT=1) a skip not listed in tests/skips.py fails.
BACKEND_SKIP = {
    "bindfs": "FUSE unavailable",
    "juicefs": "JuiceFS unavailable",
    "glusterfs": "GlusterFS unavailable",
    "moosefs": "MooseFS unavailable",
}

PROBE = Path(__file__).resolve().parent / "probe"
WORKLOADS = Path(__file__).resolve().parent / "workloads"

_REASON = unavailable_reason()

# Apply to a module or test that needs simulated nodes: skips (with the reason) only where they cannot run.
needs_cluster = pytest.mark.skipif(_REASON is not None, reason=f"simulated cluster: {_REASON}")


def job_env(base: Mapping[str, str], probe_dir: Path | None = None, **extra: str) -> dict[str, str]:
    """A job's environment: ``base`` (a clean one) plus unbuffered output, gloo on loopback, and the probe."""
    env = dict(base)
    env.update(PYTHONUNBUFFERED="1", GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    if probe_dir is not None:
        probe_dir.mkdir(parents=True, exist_ok=True)
        env.update(PYTHONPATH=str(PROBE), FSG_PROBE_DIR=str(probe_dir))
    env.update(extra)
    return env


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """``make_cluster(nodes=2, cache_s=None, backend="bindfs", ...)``: a simulated cluster under this test's
    ``tmp_path`` on ``backend`` (``bindfs``, ``juicefs``, ``glusterfs``: ``tests/cluster/backends.py``), torn
    down (processes ended, mounts gone, volumes stopped) when the test ends, pass, fail or timeout. A backend
    that cannot run here skips the test, naming the error."""
    with contextlib.ExitStack() as stack:
        count = 0

        def make(nodes: int = 2, cache_s: float | None = None, backend: str = "bindfs", **options: object) -> Cluster:
            nonlocal count
            count += 1
            reason = backends.unavailable(backend)
            if reason is not None:
                pytest.skip(f"{BACKEND_SKIP[backend]}: {reason}")
            root = tmp_path / f"cluster{count}"
            try:
                return stack.enter_context(cluster(nodes, cache_s, root=root, backend=backend, **options))  # type: ignore[arg-type]
            except RuntimeError as error:
                if backend == "bindfs":
                    raise
                pytest.skip(f"{BACKEND_SKIP[backend]}: {error}")

        yield make


# --- two views of one directory, without namespaces ---------------------------------------------------------


def fuse_unavailable_reason() -> str | None:
    """Why a bindfs FUSE mount cannot be made here (no namespaces needed), or None."""
    missing = [tool for tool in ("bindfs", "fusermount3") if shutil.which(tool) is None]
    if not os.path.exists("/dev/fuse"):
        missing.append("/dev/fuse")
    return f"missing: {', '.join(missing)}" if missing else None


_FUSE_REASON = fuse_unavailable_reason()

# Apply to a module or test that needs bindfs mounts (not namespaces): skips only where FUSE cannot be used.
needs_fuse = pytest.mark.skipif(_FUSE_REASON is not None, reason=f"FUSE unavailable: {_FUSE_REASON}")


@dataclass(frozen=True)
class StaleViews:
    """One backing directory (the "file server") seen at two mount points, as two nodes would see it."""

    backing: Path
    a: Path
    b: Path
    cache_s: float


@contextlib.contextmanager
def stale_views(root: Path, cache_s: float = 30.0) -> Iterator[StaleViews]:
    """``root/backing`` mounted at ``root/a`` and ``root/b`` by two ``bindfs`` daemons (run in the foreground,
    as our own children), each caching lookups, attributes and "missing" answers for ``cache_s`` seconds: a
    change made through one view stays invisible to the other's lookups, while listings are always fresh.
    Unmounted with ``fusermount3 -u`` (lazily if busy) and the daemons ended by pid, whatever happened;
    the mount points are then checked to be gone. A mount that cannot be made skips the test."""
    views = StaleViews(root / "backing", root / "a", root / "b", cache_s)
    for path in (views.backing, views.a, views.b):
        path.mkdir(parents=True, exist_ok=True)
    daemons: list[tuple[Path, subprocess.Popen[bytes]]] = []
    try:
        for point in (views.a, views.b):
            daemon = subprocess.Popen(
                ["bindfs", "-f", "-o", bindfs_options(cache_s), str(views.backing), str(point)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            daemons.append((point, daemon))
            deadline = time.monotonic() + 10
            while not mounts_under(point):
                if daemon.poll() is not None:
                    error = daemon.stderr.read().decode(errors="replace").strip() if daemon.stderr else ""
                    pytest.skip(f"FUSE unavailable: bindfs exited with status {daemon.returncode}: {error}")
                if time.monotonic() > deadline:
                    pytest.skip(f"FUSE unavailable: bindfs did not mount {point} within 10 s")
                time.sleep(0.005)
        yield views
    finally:
        for point, daemon in reversed(daemons):
            if mounts_under(point):
                done = subprocess.run(["fusermount3", "-u", str(point)], check=False, capture_output=True)
                if done.returncode != 0:
                    subprocess.run(["fusermount3", "-u", "-z", str(point)], check=False, capture_output=True)
            try:
                daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(timeout=10)
            if daemon.stderr is not None:
                daemon.stderr.close()
        leaked = mounts_under(root)
        for point in reversed(leaked):  # never expected
            subprocess.run(["umount", "-l", point], check=False)
        assert not leaked, f"mounts left behind: {leaked}"


@pytest.fixture
def stale_mounts(tmp_path: Path) -> Iterator[StaleViews]:
    """Two 30 s-cached bindfs views of one backing directory under this test's ``tmp_path`` (see
    ``stale_views``), unmounted when the test ends, pass or fail."""
    with stale_views(tmp_path / "views") as views:
        yield views
