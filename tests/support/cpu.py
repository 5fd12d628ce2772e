"""Each test's CPU time (issue 48: where the suite's time goes), where ``FSGUARD_TESTS_CPU`` names a directory.

A test's CPU time: its worker's own, and that of the processes it started and waited for (``os.times``' children:
a launcher counts the ranks it waited for), from its setup to its teardown. A service the suite started and never
waited for (a JuiceFS mount, ``glusterd``) is not counted. Each worker appends one JSON line a test to
``<dir>/cpu-<worker>.jsonl``; ``python -m tests.support.cpu DIR [--json FILE]`` sums them by module and lists the costliest tests.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

WHERE = os.environ.get("FSGUARD_TESTS_CPU")


def _cpu() -> tuple[float, float]:
    """(this process's CPU seconds, its waited-for children's)."""
    t = os.times()
    return t.user + t.system, t.children_user + t.children_system


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    if WHERE is None:
        yield
        return
    own, children = _cpu()
    yield
    own_after, children_after = _cpu()
    line = {"test": item.nodeid, "own_s": own_after - own, "children_s": children_after - children}
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(WHERE).mkdir(parents=True, exist_ok=True)
    with open(Path(WHERE) / f"cpu-{worker}.jsonl", "a") as out:
        out.write(json.dumps(line) + "\n")


def summary(where: Path, shown: int = 25) -> dict[str, Any]:
    """The tests' CPU seconds in all, by module (costliest first), and the ``shown`` costliest tests."""
    tests = [json.loads(line) for path in sorted(where.glob("cpu-*.jsonl")) for line in path.read_text().splitlines()]
    for test in tests:  # a module by its dotted name (``tests.test_races``): no "/" in a results file's key
        module, _, rest = test["test"].partition("::")
        test["test"] = f"{module.removesuffix('.py').replace('/', '.')}::{rest}"
    by_module: dict[str, float] = defaultdict(float)
    for test in tests:
        by_module[test["test"].split("::")[0]] += test["own_s"] + test["children_s"]
    costly = sorted(tests, key=lambda t: -(t["own_s"] + t["children_s"]))[:shown]
    return {
        "tests": len(tests),
        "cpu_s": round(sum(by_module.values()), 1),
        "by_module": {m: round(s, 1) for m, s in sorted(by_module.items(), key=lambda i: -i[1])},
        "costliest": {t["test"]: round(t["own_s"] + t["children_s"], 1) for t in costly},
    }


def main(argv: list[str]) -> None:
    """``DIR [--json FILE]``: print the summary of ``DIR``; with ``--json``, write it there too."""
    found = summary(Path(argv[0]))
    if argv[1:2] == ["--json"]:
        Path(argv[2]).write_text(json.dumps(found, indent=2) + "\n")
    total = found["cpu_s"]
    print(f"{found['tests']} tests, {total:.0f} CPU s")
    print("\n".join(f"{s:8.1f} {100 * s / total:5.1f}% {m}" for m, s in found["by_module"].items()))
    print("costliest tests:")
    print("\n".join(f"{s:8.1f} {t}" for t, s in found["costliest"].items()))


if __name__ == "__main__":
    main(sys.argv[1:])
