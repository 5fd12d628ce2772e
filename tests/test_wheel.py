"""The wheel as users get it (issue 38): built with ``python -m build``, checked with ``twine check --strict``,
installed into fresh environments by pip, by ``uv pip`` and by ``pip install --user``, and active there in a
rank of a job.

What the distribution ships is declared once, in ``SHIPPED``: a change to how fsguard starts (another start-up
file, a second wheel for newer interpreters) changes that table and every check follows it.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.tags import Tag, sys_tags
from packaging.utils import parse_wheel_filename

from fsguard.config import ALL_OPS
from tests.support.env import ROOT, TORCHRUN_ENV, clean_env
from tests.support.venvs import purelib

# Each wheel `python -m build` makes (a file-name pattern) -> the files it puts at the top of site-packages, the
# start-up hooks. The wheel an interpreter installs is the one `wheel_for` picks by its tags, as pip does.
# On CPython < 3.18 the build makes the wheel for 3.10-3.17 (``fsguard.pth`` alone); the one for 3.18+, which adds
# ``fsguard.start``, is built with ``FSGUARD_WHEEL=start`` (hatch_build.py; tests/test_activation.py checks it).
SHIPPED: dict[str, tuple[str, ...]] = {
    "fsguard-*-py310.py311.py312.py313.py314.py315.py316.py317-none-any.whl": ("fsguard.pth",),
}
CONSOLE_SCRIPT = "fsguard = fsguard.cli.__main__:main"
REQUIRES = ("Requires-Dist: wrapt>=1.14", "Requires-Python: >=3.10")

# A rank as torchrun starts it: the launcher's variables with FSGUARD=1.
RANK_ENV = {**TORCHRUN_ENV, "FSGUARD": "1"}
PATCHED = (
    "import fsguard, os, shutil; print(sorted(fsguard.installed()));"
    "print(all(hasattr(f, '__wrapped__') for f in (os.makedirs, os.rename, shutil.rmtree)))"
)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build`` of the working tree: the sdist, then the wheel built from that sdist."""
    missing = [name for name in ("build", "twine", "uv") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: install requirements-test.txt (bash scripts/test.sh)")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def wheels(dist: Path) -> list[Path]:
    return sorted(dist.glob("*.whl"))


def wheel_for(dist: Path) -> Path:
    """The wheel an installer picks for this interpreter among those built: the one with the best supported tag,
    ranked as pip ranks them (``packaging.tags.sys_tags``)."""
    rank = {tag: i for i, tag in enumerate(sys_tags())}
    fits = [(min(rank[t] for t in tags if t in rank), w) for w in wheels(dist) if rank.keys() & (tags := tag_set(w))]
    return min(fits)[1]


def tag_set(wheel: Path) -> frozenset[Tag]:
    return parse_wheel_filename(wheel.name)[3]


def hooks_of(wheel: Path) -> tuple[str, ...]:
    """The start-up files ``SHIPPED`` declares for ``wheel``."""
    (pattern,) = [p for p in SHIPPED if fnmatch.fnmatch(wheel.name, p)]
    return SHIPPED[pattern]


def top_level(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name for name in archive.namelist() if "/" not in name}


def test_build_makes_one_sdist_and_the_declared_wheels(dist: Path) -> None:
    assert len(list(dist.glob("fsguard-*.tar.gz"))) == 1
    names = [w.name for w in wheels(dist)]
    assert len(names) == len(SHIPPED), names
    for pattern in SHIPPED:
        assert len(fnmatch.filter(names, pattern)) == 1, (pattern, names)


def test_twine_check_strict(dist: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, sorted(dist.iterdir()))],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == len(list(dist.iterdir())), done.stdout


def test_wheel_holds_the_start_up_files_the_package_and_its_metadata(dist: Path) -> None:
    for wheel in wheels(dist):
        assert top_level(wheel) == set(hooks_of(wheel)), wheel.name
        with zipfile.ZipFile(wheel) as archive:
            names = set(archive.namelist())
            assert {"fsguard/__init__.py", "fsguard/_boot.py", "fsguard/py.typed", "fsguard/cli/__main__.py"} <= names
            assert not [n for n in names if n.startswith(("tests/", "bench/", "docs/"))]
            info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
            assert CONSOLE_SCRIPT in archive.read(f"{info}/entry_points.txt").decode()
            metadata = archive.read(f"{info}/METADATA").decode()
            for line in REQUIRES:
                assert line in metadata.splitlines(), line
            for hook in top_level(wheel):
                assert archive.read(hook) == (ROOT / hook).read_bytes(), hook


def test_sdist_holds_what_the_wheel_is_built_from(dist: Path) -> None:
    (sdist,) = dist.glob("fsguard-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    hooks = {hook for files in SHIPPED.values() for hook in files}
    assert hooks | {"pyproject.toml", "README.md", "fsguard/__init__.py"} <= names


# --- installed, as users install it --------------------------------------------------------------------------


def fresh_venv(where: Path) -> Path:
    """A new venv without pip or anything else; returns its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(where)
    return where / "bin" / "python"


def link_wrapt(site: Path) -> None:
    """wrapt, fsguard's one dependency, from this environment (the version under test, no network)."""
    site.mkdir(parents=True, exist_ok=True)
    (site / "wrapt").symlink_to(Path(__import__("wrapt").__file__).parent)


def run(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=clean_env(env), capture_output=True, text=True, timeout=180)


def check_installed(wheel: Path, python: Path, script: Path, site: Path, env: dict[str, str] | None = None) -> None:
    """``wheel``'s start-up files at the top of ``site``, ``fsguard status`` naming the ``.pth``, a rank patched."""
    env = env or {}
    for hook in hooks_of(wheel):
        assert (site / hook).is_file(), f"{hook} not at the top of {site}"
    status = run([str(script), "status"], env)
    assert status.returncode == 0, status.stderr
    assert f".pth:        {site / 'fsguard.pth'}" in status.stdout, status.stdout

    off = run([str(python), "-c", "import sys; print('fsguard' in sys.modules)"], env)
    assert off.stdout.split() == ["False"], off.stdout + off.stderr  # disabled: nothing imported

    rank = run([str(python), "-c", PATCHED], {**env, **RANK_ENV})
    assert rank.returncode == 0 and not rank.stderr, rank.stderr
    assert rank.stdout.splitlines() == [str(sorted(ALL_OPS)), "True"], rank.stdout  # patched by the .pth


def test_pip_installs_the_wheel(dist: Path, tmp_path: Path) -> None:
    python = fresh_venv(tmp_path / "venv")
    done = run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", str(wheel_for(dist))])
    assert done.returncode == 0, done.stderr
    site = purelib(python)
    link_wrapt(site)
    check_installed(wheel_for(dist), python, python.parent / "fsguard", site)


def test_uv_pip_installs_the_wheel(dist: Path, tmp_path: Path) -> None:
    python = fresh_venv(tmp_path / "venv")
    uv = [sys.executable, "-m", "uv", "pip", "install", "--offline", "--no-deps", "--python", str(python)]
    done = run([*uv, str(wheel_for(dist))], {"UV_CACHE_DIR": str(tmp_path / "uv-cache"), "UV_NO_CONFIG": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    site = purelib(python)
    link_wrapt(site)
    check_installed(wheel_for(dist), python, python.parent / "fsguard", site)


BASE = Path(getattr(sys, "_base_executable", sys.executable))  # a venv's python does not see the user site


def install_user(dist: Path, tmp_path: Path) -> tuple[dict[str, str], Path]:
    """``pip install --user --no-deps`` of the wheel by the base interpreter, with a throwaway HOME and
    PYTHONUSERBASE; returns that environment and the user site."""
    env = {"HOME": str(tmp_path / "home"), "PYTHONUSERBASE": str(tmp_path / "userbase")}
    where = run([str(BASE), "-c", "import site, sys; print(site.ENABLE_USER_SITE, sys.prefix == sys.base_prefix)"])
    assert where.stdout.split() == ["True", "True"], f"{BASE} has no user site: {where.stdout}{where.stderr}"
    done = run([str(BASE), "-m", "pip", "install", "--user", "--no-deps", str(wheel_for(dist))], env)
    assert done.returncode == 0, done.stdout + done.stderr
    site = Path(run([str(BASE), "-c", "import site; print(site.getusersitepackages())"], env).stdout.strip())
    assert site.is_relative_to(tmp_path / "userbase"), site
    return env, site


def test_pip_install_user(dist: Path, tmp_path: Path) -> None:
    """fsguard and wrapt both in the user site (what ``pip install --user fsguard`` gives where the system has
    no wrapt)."""
    env, site = install_user(dist, tmp_path)
    link_wrapt(site)
    check_installed(wheel_for(dist), BASE, tmp_path / "userbase" / "bin" / "fsguard", site, env)


def test_pip_install_user_with_wrapt_in_the_system_site(dist: Path, tmp_path: Path) -> None:
    """``pip install --user fsguard`` where the system site-packages already hold wrapt: pip installs fsguard
    alone into the user site, and a rank must still be patched."""
    if run([str(BASE), "-s", "-c", "import wrapt"]).returncode != 0:
        pytest.skip(f"{BASE} has no wrapt in its own site-packages")
    env, site = install_user(dist, tmp_path)
    check_installed(wheel_for(dist), BASE, tmp_path / "userbase" / "bin" / "fsguard", site, env)
