"""fsguard under the other CPython versions it declares (``requires-python >= 3.10``), not only the test one.

For each version (3.10, 3.12, 3.13, 3.15), a CPython of that version is looked for; none found -> the version's
tests skip (a machine may lack it). Found, a fresh venv is made with it (``python -m venv``; pip: that
interpreter's own, or the venv's where it has none) and the wheel and wrapt (the test environment's version,
from the package index) are installed into it; if pip cannot install wrapt (no index), the version's tests skip
with pip's reason. In that venv:

* the whole bad-input parity table of ``tests/test_parity.py`` runs (``tests/parity_support.py``), forced and in
  a launched rank, and so does ``tests/test_parity_family.py``'s: on 3.12+ the ``shutil.rmtree(onexc=...)`` rows
  really run;
* the caller's-handler rows of ``tests/test_handlers.py`` (each version's bytecode differs; 3.10 reads the
  source's ``ast``), and two claim idioms of ``tests/test_claims.py`` (4 ranks x 20 rounds);
* activation: the ``.pth`` patches all four functions with ``FSGUARD=1`` under a torchrun environment, and
  nothing with ``FSGUARD`` unset, where ``-X importtime`` shows no fsguard or wrapt import;
* the four races of ``tests/test_races.py`` (4 ranks, its worker and its checks): they happen without
  fsguard and are absorbed, with well-formed records, with it;
* rmtree, whose standard implementation differs most between versions (a recursive walk up to 3.12, a
  stack of steps from 3.13): a directory that gained entries mid-walk is removed again only while it is
  the same directory, and a tree a peer renamed mid-walk is found under its new name (``hazard``).

On 3.15+ (PEP 829) also: the default wheel (the ``.pth`` alone) costs a disabled interpreter no ``pkgutil``
import, and the wheel for 3.18+ (``fsguard.start`` beside the ``.pth``) starts fsguard through the ``.start``
entry point, once, with the ``.pth`` line suppressed, patches, absorbs a makedirs race, and says so in
``fsguard status``.

Where the interpreters come from: ``FSGUARD_TEST_PYTHONS`` (paths separated by ``os.pathsep``) replaces the
search, and may add versions beyond the four; otherwise ``python3.X`` on ``PATH``,
``/opt/python3.X/bin/python3.X`` (where ``scripts/get-python.sh`` puts Debian sid's 3.15 or 3.14) and
``$PYENV_ROOT/versions/3.X*/bin/python3`` (``~/.pyenv``, ``/root/.pyenv``), each checked by running it (a
pyenv shim of a version that is not selected fails, and is passed over).

When ``COVERAGE_PROCESS_START`` is set (``scripts/test.sh``), coverage is installed into each venv too
(the newest for that version) and started in every interpreter of it, so the 3.12+ branches count.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fsguard.config import ALL_OPS
from tests import parity_support as parity
from tests import test_claims as claims
from tests import test_handlers as handlers
from tests import test_races as races
from tests import test_rmwalk_contract as contract
from tests import test_rmwalk_parity as rmwalk_parity
from tests import test_rmwalk_scratch as scratch
from tests.conftest import TORCHRUN_ENV, run_python
from tests.support import venvs
from tests.workers import parity_family as family

DEFAULT_VERSIONS = ("3.10", "3.12", "3.13", "3.15")
START_FROM = (3, 15)  # PEP 829: .start files run, and suppress the import lines of the matching .pth
OVERRIDE = "FSGUARD_TEST_PYTHONS"
PIP = ("-m", "pip", "install", "-q", "--disable-pip-version-check")
PROBE = "import platform, sys; print(platform.python_implementation(), '%d.%d' % sys.version_info[:2])"


def _probe(path: str) -> str | None:
    """``"3.X"`` when ``path`` runs as CPython 3.X, else None."""
    try:
        done = subprocess.run([path, "-c", PROBE], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    words = done.stdout.split()
    return words[1] if done.returncode == 0 and len(words) == 2 and words[0] == "CPython" else None


def _override() -> list[str] | None:
    value = os.environ.get(OVERRIDE, "").strip()
    return [p for p in value.split(os.pathsep) if p] if value else None


def _candidates(version: str) -> list[str]:
    """Where to look for CPython ``version``, in order."""
    listed = _override()
    if listed is not None:
        return listed
    found = [shutil.which(f"python{version}") or "", f"/opt/python{version}/bin/python{version}"]  # get-python.sh
    roots = [os.environ.get("PYENV_ROOT", ""), os.path.expanduser("~/.pyenv"), "/root/.pyenv"]
    for root in dict.fromkeys(r for r in roots if r):
        newest_first = sorted(
            glob.glob(os.path.join(root, "versions", f"{version}*", "bin", "python3")),
            key=lambda p: [int(n) if n.isdigit() else -1 for n in Path(p).parent.parent.name.split(".")],
            reverse=True,
        )
        found += newest_first
    return [p for p in dict.fromkeys(found) if p]


def find_python(version: str) -> Path:
    """The first candidate that really is CPython ``version``; skips the test when there is none."""
    tried = _candidates(version)
    for path in tried:
        if _probe(path) == version:
            return Path(path)
    where = f"{OVERRIDE}={os.environ[OVERRIDE]!r}" if _override() is not None else "PATH and pyenv"
    pytest.skip(f"CPython {version} not found: none of {tried or 'no candidates'} runs as it (searched {where})")


def _versions() -> list[str]:
    """The declared versions besides the test environment's 3.11, and any others listed in the override."""
    extra = {v for v in map(_probe, _override() or []) if v}
    return sorted(set(DEFAULT_VERSIONS) | extra, key=lambda v: tuple(map(int, v.split("."))))


@dataclass(frozen=True)
class Venv:
    version: str
    python: Path  # the venv's interpreter, fsguard and wrapt installed


def _measure(pip: list[str], python: Path) -> None:
    """Start coverage in every interpreter of this venv that imports fsguard, from its first import (as in the
    test environment's venvs): the newest coverage this version runs (the test environment's may need a newer
    Python); [toml]: 3.10 reads pyproject.toml's settings only with tomli. Not installable: this venv is not
    measured, the tests run all the same.

    coverage (7.16+) installs a ``.pth`` of its own that starts it in every interpreter of the venv while
    ``COVERAGE_PROCESS_START`` is set: the runs without fsguard, the probes, pip, which have no fsguard line to
    measure, each paid for coverage's start-up, tracing and data file (about 3x the CPU of a launched-rank row:
    issue 48). It is removed; the hook of ``venvs.measure_coverage`` measures what it measured."""
    if subprocess.run([*pip, "coverage[toml]"], capture_output=True, timeout=300).returncode != 0:
        return
    site = venvs.purelib(python)
    for pth in site.glob("*.pth"):
        if "coverage" in pth.name and "process_startup" in pth.read_text():
            pth.unlink()
    venvs.measure_coverage(site, None)


def _venv_and_pip(base: Path, where: Path) -> tuple[Path, list[str]]:
    """A venv of ``base`` at ``where``, and the pip command that installs into it: the base interpreter's own
    pip (``--python``: the same version's pip; no ``ensurepip`` copy into the venv, about 3 s of CPU each), or,
    where the base has none (Debian's 3.15 under /opt), the venv's own from ``ensurepip``."""
    has_pip = "import importlib.util, sys; sys.exit(importlib.util.find_spec('pip') is None)"
    own = subprocess.run([str(base), "-c", has_pip], capture_output=True, timeout=60).returncode != 0
    args = [str(base), "-m", "venv", *([] if own else ["--without-pip"]), str(where)]
    subprocess.run(args, check=True, capture_output=True, timeout=120)
    python = where / "bin" / "python"
    if own:
        return python, [str(python), *PIP]
    return python, [str(base), "-m", "pip", "--python", str(python), *PIP[2:]]


def _build(version: str, base: Path, where: Path, wheel: Path) -> Venv:
    python, pip = _venv_and_pip(base, where)
    # The wheel is a local file: this must work, offline too. Its dependency comes in the next step.
    done = subprocess.run([*pip, "--no-deps", str(wheel)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"CPython {version}: pip could not install the wheel:\n{done.stderr}"
    wrapt = f"wrapt=={__import__('wrapt').__version__}"  # the version the rest of the suite runs with
    done = subprocess.run([*pip, wrapt], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        pytest.skip(f"CPython {version}: pip could not install {wrapt} (no package index here?): {tail}")
    if os.environ.get("COVERAGE_PROCESS_START"):
        _measure(pip, python)
    return Venv(version, python)


@pytest.fixture(scope="module", params=_versions())
def venv(request: pytest.FixtureRequest, wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A fresh venv of CPython ``request.param`` with the wheel and wrapt, made once per version."""
    version: str = request.param
    base = find_python(version)
    return _build(version, base, tmp_path_factory.mktemp(f"py{version}-") / "env", wheel)


@pytest.fixture(scope="module")
def outcomes(venv: Venv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[parity.Outcomes]:
    """The parity table's outcomes under this version (see ``tests/parity_support.py``)."""
    with parity.collect(venv.python, tmp_path_factory.mktemp(f"parity{venv.version}-")) as merged:
        yield merged


def test_parity_ran_every_row_on_this_version(venv: Venv, outcomes: parity.Outcomes) -> None:
    parity.check_meta(outcomes)
    metas = [meta for mode in parity.MODES for meta in outcomes[mode]["meta"].values()]
    assert {".".join(map(str, meta["python"][:2])) for meta in metas} == {venv.version}
    if all(meta["onexc"] for meta in metas):  # 3.12+: the onexc rows run here, they must not skip
        onexc_rows = [n for n in outcomes["off"]["rows"] if "onexc" in n]
        assert onexc_rows and not [n for n in onexc_rows if "skip" in outcomes["off"]["rows"][n]]


@pytest.mark.parametrize("name", parity.row_params())
def test_parity_row(venv: Venv, outcomes: parity.Outcomes, name: str) -> None:
    parity.check_row(outcomes, name)


@pytest.mark.parametrize("name", parity.row_params(mode="launched"))
def test_parity_row_launched(venv: Venv, outcomes: parity.Outcomes, name: str) -> None:
    parity.check_row(outcomes, name, mode="launched")


@pytest.fixture(scope="module")
def handler_outcomes(venv: Venv, tmp_path_factory: pytest.TempPathFactory) -> handlers.Outcomes:
    return handlers.collect(venv.python, tmp_path_factory.mktemp(f"handlers{venv.version}-"))


# Known gaps by version: (major, minor) -> row keys, each a strict expected failure (a fix turns it into an XPASS
# failure, and the entry is removed). None now. "rmtree_retry:residue", listed for 3.14 and 3.15 until 2026-12-06,
# is fixed for the cause found on 3.15.2: its ``rmtree`` (as any release with ``_onexc_kwargs``) wraps a caller's
# ``onexc`` in an adapter of its own, and the retry read the directory's stat from the adapter's frame instead of
# the walk's (fsguard.rmwalk.handler._walk_frame).
KNOWN_GAPS: dict[tuple[int, ...], set[str]] = {}


def _known_gap(request: pytest.FixtureRequest, venv: Venv, key: str) -> None:
    version = tuple(int(n) for n in venv.version.split("."))
    if key in KNOWN_GAPS.get(version, set()):
        reason = f"known gap on CPython {venv.version}: {key} (see KNOWN_GAPS)"
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))


@pytest.mark.parametrize("name", list(handlers.rows.ROWS))
def test_handler_row(
    request: pytest.FixtureRequest, venv: Venv, handler_outcomes: handlers.Outcomes, name: str
) -> None:
    _known_gap(request, venv, f"handler:{name}")
    assert handler_outcomes["force"]["meta"]["python"] == [int(n) for n in venv.version.split(".")]
    handlers.check_row(handler_outcomes, name)


@pytest.mark.parametrize("idiom", ["sequential", "helper"])
def test_claim_idiom(venv: Venv, tmp_path: Path, idiom: str) -> None:
    claims.check_claim_idiom(venv.python, tmp_path, idiom)


@pytest.fixture(scope="module")
def family_outcomes(venv: Venv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[parity.Outcomes]:
    """The remove/mkdir/symlink/link table's outcomes under this version (tests/workers/parity_family.py)."""
    with parity.collect(venv.python, tmp_path_factory.mktemp(f"family{venv.version}-"), family) as merged:
        yield merged


@pytest.mark.parametrize("name", parity.row_params(family))
def test_parity_family_row(venv: Venv, family_outcomes: parity.Outcomes, name: str) -> None:
    parity.check_meta(family_outcomes, family)
    parity.check_row(family_outcomes, name, family)


@pytest.mark.parametrize("name", parity.row_params(family, mode="launched"))
def test_parity_family_row_launched(venv: Venv, family_outcomes: parity.Outcomes, name: str) -> None:
    parity.check_row(family_outcomes, name, family, mode="launched")


STATE = """
import json, os, shutil, sys
functions = {"makedirs": os.makedirs, "rename": os.rename, "replace": os.replace, "rmtree": shutil.rmtree}
functions.update({"remove": os.remove, "mkdir": os.mkdir, "symlink": os.symlink, "link": os.link, "rmdir": os.rmdir})
print(json.dumps({
    "patched": sorted(name for name, f in functions.items() if hasattr(f, "__wrapped__")),
    "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("fsguard", "wrapt")),
    "version": "%d.%d" % sys.version_info[:2],
}))
"""


def test_activation(venv: Venv) -> None:
    """The ``.pth`` patches every guarded function in a rank with ``FSGUARD=1``; unset, it imports nothing."""
    import json

    on = run_python(venv.python, STATE, {**TORCHRUN_ENV, "FSGUARD": "1"})
    assert on.returncode == 0, on.stderr
    state = json.loads(on.stdout)
    assert state["version"] == venv.version
    assert state["patched"] == sorted(ALL_OPS), on.stderr
    assert on.stderr == ""

    off = run_python(venv.python, STATE, TORCHRUN_ENV, args=("-X", "importtime"))
    assert off.returncode == 0, off.stderr
    state = json.loads(off.stdout)
    assert state["patched"] == [] and state["modules"] == []
    imported = [line.rsplit("|", 1)[-1].strip() for line in off.stderr.splitlines() if "|" in line]
    assert imported, "importtime printed nothing"
    assert not [m for m in imported if m.split(".")[0] in ("fsguard", "wrapt")]
    assert "fsguard:" not in off.stderr


@pytest.mark.parametrize("race", races.RACES, ids=lambda r: r.op)
def test_race(venv: Venv, tmp_path: Path, race: races.Race) -> None:
    """A race of ``tests/test_races.py`` under this version: it happens without fsguard (some rank fails with
    the race's error) and is absorbed with it, with every record checked as there. (Its premise that rmtree
    ranks also fail on entries inside the tree is left out: from 3.13 the standard rmtree ignores those
    itself, and only the top's removal fails.)"""
    job = races.run_job(venv.python, race, tmp_path / "without", guarded=False)
    lost = races.failures(job)
    assert lost, f"{race.op}: the race never happened in {race.iterations} iterations"
    assert {(f["call"], f["type"], f["errno"]) for f in lost} == {(race.op, *race.error)}
    races.check_race_absorbed(venv.python, tmp_path / "with", race)


@pytest.mark.parametrize("variant", ["peer", "residue", "replace"])
def test_rmtree_retry_of_a_directory_that_gained_entries(
    request: pytest.FixtureRequest, venv: Venv, variant: str
) -> None:
    """The retry must know the directory the walk emptied from this version's rmtree ("replace": a peer's
    new directory standing there is left alone; "peer": a peer's new entry is left alone too)."""
    _known_gap(request, venv, f"rmtree_retry:{variant}")
    races.check_rmtree_retry(venv.python, variant)


@pytest.mark.parametrize("handler", rmwalk_parity.HANDLERS)
@pytest.mark.parametrize("kind", rmwalk_parity.KINDS)
def test_rmwalk_parity(venv: Venv, kind: str, handler: str) -> None:
    """``tests/test_rmwalk_parity.py`` under this version: on 3.12+ its ``onexc`` rows really run."""
    rmwalk_parity.check(venv.python, kind, handler)


def test_plain_walk(venv: Venv, tmp_path: Path) -> None:
    """``tests/test_rmwalk_scratch.py``'s plain walk under this version's own walk (3.13+: a stack; 3.15: through
    ``_rmtree_impl``): no wrapper per step, the program's own functions obeyed, handlers told ``os.unlink``."""
    scratch.check_plain_walk(venv.python, tmp_path)


def test_error_keywords_take_the_short_course(venv: Venv, tmp_path: Path) -> None:
    """``tests/test_rmwalk_scratch.py``'s error keywords under this version: a ``TemporaryDirectory``'s clean-up (3.12+:
    with ``onexc``) and ``rmtree`` with ``onerror``/``ignore_errors`` take the short course, as without fsguard."""
    scratch.check_error_keywords(venv.python, tmp_path)


@pytest.mark.parametrize("handler", contract.HANDLERS)
@pytest.mark.parametrize("case", contract.CASES)
def test_rmtree_contract(venv: Venv, tmp_path: Path, case: str, handler: str) -> None:
    """``tests/test_rmwalk_contract.py`` under this version (3 launched ranks, bare and in an executor): the
    caller's ``onerror``/``onexc`` sees what the standard rmtree shows it; on 3.12+ the ``onexc`` rows run."""
    for wrap in ("none", "executor"):
        contract.check(venv.python, tmp_path / wrap, case, wrap, handler)


def test_rmtree_of_a_tree_a_peer_renamed_is_a_hazard(venv: Venv) -> None:
    """The renamed tree must be found by the inode this version's rmtree started on."""
    races.check_rmtree_hazard(venv.python)


def _at_least(venv: Venv, version: tuple[int, int]) -> bool:
    return tuple(int(n) for n in venv.version.split(".")) >= version


def _status(python: Path, env: dict[str, str]) -> dict[str, object]:
    import json

    done = run_python(python, "from fsguard.cli.__main__ import main; main(['status', '--json'])", env)
    assert done.returncode == 0, done.stderr
    info: dict[str, object] = json.loads(done.stdout)
    return info


def test_status_names_the_pth(venv: Venv) -> None:
    """The default wheel carries the ``.pth`` alone: it is what runs, on every version up to 3.17."""
    info = _status(venv.python, {**TORCHRUN_ENV, "FSGUARD": "1"})
    startup = info["startup"]
    assert isinstance(startup, dict) and startup["ran"] == "fsguard.pth"
    assert str(startup["file"]).endswith("fsguard.pth")


def test_disabled_start_up_imports_no_pkgutil(venv: Venv) -> None:
    """Issue 40: any ``.start`` file makes a 3.15+ interpreter import ``pkgutil`` (and ``re``) to resolve its
    entry point, about 7 ms of every start; the default wheel ships none."""
    off = run_python(venv.python, "pass", TORCHRUN_ENV, args=("-X", "importtime"))
    assert off.returncode == 0, off.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in off.stderr.splitlines() if "|" in line]
    assert imported and "pkgutil" not in imported


@pytest.fixture(scope="module")
def start_venv(venv: Venv, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A venv of this version (3.15+) with the wheel for 3.18+: ``fsguard.start`` beside ``fsguard.pth``."""
    if not _at_least(venv, START_FROM):
        pytest.skip(f"CPython {venv.version} runs no .start files (PEP 829: 3.15+)")
    where = tmp_path_factory.mktemp(f"start{venv.version}-")
    wheel = venvs.build_wheel(where / "wheel", flavour="start")
    base = find_python(venv.version)
    return _build(venv.version, base, where / "env", wheel)


def test_start_file_starts_fsguard_once(start_venv: Venv) -> None:
    """PEP 829 on a real interpreter: the ``.pth`` import line is suppressed, the entry point runs once."""
    import json

    code = STATE + "import fsguard._boot\nprint(fsguard._boot.started_by())\n"
    on = run_python(start_venv.python, code, {**TORCHRUN_ENV, "FSGUARD": "1"}, args=("-v",))
    assert on.returncode == 0, on.stderr[-3000:]
    printed, started_by = on.stdout.splitlines()
    assert json.loads(printed)["patched"] == sorted(ALL_OPS) and started_by == "fsguard.start"
    assert "fsguard.pth are suppressed due to matching" in on.stderr
    assert on.stderr.count("Executing entry point: fsguard._boot:start") == 1
    assert "fsguard.pth: import os" not in on.stderr  # the .pth line was not run (as well)
    info = _status(start_venv.python, {**TORCHRUN_ENV, "FSGUARD": "1"})
    startup = info["startup"]
    assert isinstance(startup, dict) and startup["ran"] == "fsguard.start"
    assert str(startup["file"]).endswith("fsguard.start")
    off = run_python(start_venv.python, STATE, TORCHRUN_ENV)
    assert off.returncode == 0 and json.loads(off.stdout)["patched"] == [], off.stderr


def test_start_file_absorbs_a_makedirs_race(start_venv: Venv, tmp_path: Path) -> None:
    """The two-rank ``makedirs`` race, with fsguard started by the ``.start`` entry point."""
    race = next(r for r in races.RACES if r.op == "makedirs")
    races.check_race_absorbed(start_venv.python, tmp_path / "with", race)
