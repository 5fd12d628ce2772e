"""The benchmarks keep working: each script, and the runner, with tiny sizes. No timing assertions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, clean_env


def bench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, *args], env=clean_env(), capture_output=True, text=True, timeout=400, cwd=cwd
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "machine:" in done.stdout and "cores" in done.stdout
    return done


@pytest.mark.timeout(420)
def test_startup_alone(tmp_path: Path) -> None:
    done = bench(str(ROOT / "bench" / "startup.py"), "--quick", "--json", str(tmp_path / "s.json"), cwd=tmp_path)
    result = json.loads((tmp_path / "s.json").read_text())["startup"]
    assert {"absent", "disabled", "force", "torchrun", "wrapt"} <= set(result["arms"])
    assert result["summary"]["disabled_imports"] == []  # disabled: no fsguard or wrapt import at all
    assert result["importtime"]["force"]["fsguard_own_ms"] > 0
    assert "fsguard's own share" in done.stdout


@pytest.mark.timeout(420)
def test_calls_alone(tmp_path: Path) -> None:
    done = bench(str(ROOT / "bench" / "calls.py"), "--quick", "--json", str(tmp_path / "c.json"), cwd=tmp_path)
    result = json.loads((tmp_path / "c.json").read_text())["calls"]
    assert set(result["happy_path"]) == {
        "replace",
        "rename",
        "makedirs",
        "rmtree",
        "remove",
        "rmdir",
        "mkdir",
        "symlink",
        "link",
        "null",
    }
    for arms in result["happy_path"].values():
        assert {"unpatched", "wrapt", "shim"} <= set(arms)
    assert set(result["decisions"]) == {f"{m}/{f}" for m in ("off", "stderr", "jsonl") for f in ("empty", "full")}
    for ops in result["decisions"].values():
        for op, r in ops.items():
            assert r["raised"] == 0, (op, r)  # every decision scenario is a race fsguard absorbs
    for op, r in result["bindfs"].items():
        if op != "skipped":
            assert r["raised"] == [], (op, r)
    assert "happy path" in done.stdout


@pytest.mark.timeout(420)
def test_scale_alone(tmp_path: Path) -> None:
    bench(str(ROOT / "bench" / "scale.py"), "--quick", "--json", str(tmp_path / "x.json"), cwd=tmp_path)
    result = json.loads((tmp_path / "x.json").read_text())["scale"]
    assert result["problems"] == []
    cells = result["cells"]
    for op in ("makedirs", "rename", "replace", "rmtree"):
        assert cells[f"{op}/4/none"]["success_rate"] < 1  # the race is real without fsguard
        assert cells[f"{op}/4/fsguard"]["success_rate"] == 1
        assert cells[f"{op}/4/rank0+barrier"]["success_rate"] == 1
        assert cells[f"{op}/4/fsguard"]["store_ops_per_rank"]["total"] == 0  # no store without serialization
        store = cells.get(f"{op}/4/serialize-store")
        if store is not None:  # torch importable: every rank talked to the store
            assert store["success_rate"] == 1 and store["store_ops_per_rank"]["total"] > 0
    assert cells["convoy/4/fsguard"]["success_rate"] == 1  # every rank's own replace onto one name
    assert "convoy/4/rank0+barrier" not in cells
    cold = cells["makedirs/4/fsguard"]  # a pool of its own, the race its ranks' first call
    assert cold["cold_success_rate"] == 1 and cold["cold_jobs"] == 2 and cold["cold_wall_ms"]["p50"] > 0
    store = cells.get("makedirs/4/serialize-store")
    if store is not None:
        assert store["cold_success_rate"] == 1 and store["cold_store_ops_per_rank"]["total"] > 0
        assert store["cold_phases"][0]["clients_per_rank"]["max"] >= 1  # no process group: a connection of its own
    assert result["ranks"] == "fork" and set(result["memory_kib_per_rank"]) >= {"none/4", "fsguard/4"}


@pytest.mark.timeout(600)
def test_runner_writes_one_json(tmp_path: Path) -> None:
    out = tmp_path / "all.json"
    done = bench("-m", "bench", "--quick", "--out", str(out), cwd=ROOT)
    data = json.loads(out.read_text())
    assert {"machine", "startup", "calls", "scale", "decide"} <= set(data)
    assert "== summary ==" in done.stdout


@pytest.mark.timeout(420)
def test_yield_window_alone(tmp_path: Path) -> None:
    script = str(ROOT / "bench" / "yield_window.py")
    done = subprocess.run(
        [sys.executable, script, "--quick", "--json", str(tmp_path / "y.json")],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=400,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "y.json").read_text())
    assert set(result["arms"]) == {
        *("own", "mkdtemp", "rotation", "old", "peer-window-off", "peer-renamed", "peer-stays"),
        *("shared-renamed", "shared-stays"),
    }


@pytest.mark.timeout(420)
def test_decide_alone(tmp_path: Path) -> None:
    done = bench(str(ROOT / "bench" / "decide.py"), "--quick", "--json", str(tmp_path / "d.json"), cwd=tmp_path)
    result = json.loads((tmp_path / "d.json").read_text())["decide"]
    local = result["filesystems"]["local"]
    assert set(local["decision"]) == {"0", "100"}
    for cell in local["decision"].values():
        assert cell["raised"] == 0  # a peer's mkdir: absorbed
    for cells in local["genuine"].values():
        assert {op: c["raised"] for op, c in cells.items()} == {
            "rename-missing-source": ["FileNotFoundError"],
            "makedirs-onto-file": ["FileExistsError"],
            "makedirs-exist-ok-onto-file": ["FileExistsError"],
        }
    assert "juicefs" in result["filesystems"] and "genuine error" in done.stdout
