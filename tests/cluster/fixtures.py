"""pytest glue for the simulated cluster: a factory fixture and the environment a job runs with.

Import the fixture into a test module (``from tests.cluster.fixtures import make_cluster``) to use it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from .harness import Cluster, cluster, unavailable_reason

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
    """``make_cluster(nodes=2, cache_s=0, ...)``: a simulated cluster under this test's ``tmp_path``,
    torn down (processes ended, mounts gone) when the test ends, pass, fail or timeout."""
    with contextlib.ExitStack() as stack:
        count = 0

        def make(nodes: int = 2, cache_s: float = 0.0, **options: object) -> Cluster:
            nonlocal count
            count += 1
            return stack.enter_context(cluster(nodes, cache_s, root=tmp_path / f"cluster{count}", **options))  # type: ignore[arg-type]

        yield make
