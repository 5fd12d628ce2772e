"""The README's two commands, typed in order on a fresh clone (issue 48).

The first (``python3 -m venv venv && venv/bin/pip install . && venv/bin/fsguard demo``) leaves ``venv/`` in the
checkout; the second (``bash scripts/test.sh``) then builds the sdist and wheels there (``tests/test_wheel.py``).
Here the first command, read from README.md, runs in a copy of the working tree as a clone has it (tracked and
untracked files, not ignored ones); then what the second builds is built in that copy: the sdist and wheel must
hold what they declare and nothing the first command left, and git must see nothing new. The second command
itself is not run again from inside the test suite it runs.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.support.env import ROOT, clean_env

# What an sdist holds besides the package (pyproject.toml, [tool.hatch.build.targets.sdist]): what builds the
# wheel (the start-up files, hatch_build.py) and what a reader of the sdist needs; PKG-INFO and .gitignore hatch
# adds itself.
SDIST_FILES = {
    "pyproject.toml",
    "hatch_build.py",
    "fsguard.pth",
    "fsguard.start",
    "README.md",
    "CHANGELOG.md",
    "PKG-INFO",
    ".gitignore",
}


def readme_commands() -> list[str]:
    """The commands of README.md's "The two commands" section, in order (the ``$ `` lines of its console blocks)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```console\n(.*?)```", section, flags=re.S)
    return [line[2:].strip() for block in blocks for line in block.splitlines() if line.startswith("$ ")]


def clone_of_the_tree(where: Path) -> Path:
    """The working tree as a clone of it holds it: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    where.mkdir(parents=True)
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():  # a deleted, not yet committed file is listed too
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            (where / name).write_bytes(source.read_bytes())
            (where / name).chmod(source.stat().st_mode & 0o777)
    return where


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A copy of the tree in which README's first command ran, as typed (with bash, in the copy's root)."""
    first = readme_commands()[0]
    base = tmp_path_factory.mktemp("first-contact")
    copy = clone_of_the_tree(base / "fsguard")
    (base / "tmp").mkdir()
    done = subprocess.run(
        ["bash", "-c", first],
        cwd=copy,
        env=clean_env({"TMPDIR": str(base / "tmp"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    return copy, done


def test_the_readme_shows_two_commands_in_order() -> None:
    first, second = readme_commands()
    assert first == "python3 -m venv venv && venv/bin/pip install . && venv/bin/fsguard demo"
    assert second == "bash scripts/test.sh"


def test_the_first_command_runs_the_demo(checkout: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    copy, done = checkout
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "guarded run: succeeded" in done.stdout, done.stdout[-3000:]
    assert (copy / "venv" / "bin" / "fsguard").is_file()


def test_git_sees_nothing_the_first_command_left(checkout: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """``git status`` of the checkout after the first command: nothing new (``venv/`` is ignored)."""
    copy, _ = checkout
    git = ["git", "-C", str(copy), "-c", "core.excludesFile=/dev/null"]
    subprocess.run([*git, "init", "-q"], check=True, capture_output=True, timeout=60)
    added = subprocess.run([*git, "add", "--all", "--dry-run"], check=True, capture_output=True, text=True, timeout=60)
    names = {line.split("'")[1] for line in added.stdout.splitlines() if "'" in line}
    tree = {str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert not {n for n in names if n.startswith("venv/")}, sorted(names)[:20]
    assert names == tree - {n for n in tree if n.startswith("venv/")}, sorted(names ^ tree)[:20]


def test_the_distributions_built_there_take_what_they_declare(
    checkout: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """What ``bash scripts/test.sh`` builds next (``python -m build``: the sdist, then the wheel from it), in that
    checkout: it succeeds, the sdist holds the package and ``SDIST_FILES``, the wheel the package and its start-up
    file, and neither anything of ``venv/``."""
    copy, _ = checkout
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path), str(copy)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sdist,) = tmp_path.glob("fsguard-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    package = {str(p.relative_to(copy)) for p in (copy / "fsguard").rglob("*") if p.is_file()}
    package -= {n for n in package if "__pycache__" in n}
    assert {n for n in names if not n.startswith("fsguard/")} == SDIST_FILES
    assert {n for n in names if n.startswith("fsguard/")} == package
    (wheel,) = tmp_path.glob("fsguard-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        inside = set(archive.namelist())
    assert {n for n in inside if n.startswith("fsguard/")} == package
    assert {n.split("/")[0] for n in inside if not n.startswith("fsguard/")} == {
        "fsguard.pth",
        next(n.split("/")[0] for n in inside if ".dist-info/" in n),
    }


# --- the second command's flow: scripts/test.sh (and .ci/run) with its tools stubbed ------------------------

# Stands in for .venv/bin/python: logs each call; "pytest" exits $STUB_PYTEST_RC, coverage totals $STUB_COVERAGE.
STUB_PYTHON = """#!/usr/bin/env bash
echo "STRICT=${FSGUARD_TESTS_STRICT:-} BACKENDS=${FSGUARD_TESTS_BACKENDS:-} $*" >> "$STUB_LOG"
case "$*" in
    *"coverage run -m pytest"*) exit "$STUB_PYTEST_RC" ;;
    *"--fail-under="*) awk -v c="$STUB_COVERAGE" -v f="$(echo "$*" | sed 's/.*--fail-under=//')" 'BEGIN { exit !(c >= f) }' ;;
    *"coverage report --format=total"*) echo "$STUB_COVERAGE" ;;
esac
"""

# (pytest's exit status, the coverage total, pytest arguments) -> the test command's exit status is 0
CASES = {
    "all passed": (0, "90.0", (), True),
    "a test failed": (1, "90.0", (), False),
    "no test ran (pytest's 5)": (5, "90.0", (), False),
    "coverage under the floor": (0, "80.0", (), False),
    "a subset under the floor": (0, "20.0", ("tests/test_path.py",), True),
    "a subset failed": (1, "20.0", ("tests/test_path.py",), False),
}


def stubbed_tree(where: Path) -> Path:
    """``scripts/test.sh`` and ``.ci/run`` in a tree whose ``.venv/bin/python`` and ``scripts/lint.sh`` are stubs."""
    for name in ("scripts/test.sh", ".ci/run"):
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        (where / name).write_text((ROOT / name).read_text())
    (where / "scripts" / "lint.sh").write_text('echo "lint" >> "$STUB_LOG"\n')  # (ruff and mypy run in CI)
    python = where / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(STUB_PYTHON)
    python.chmod(0o755)
    return where


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("command", ["scripts/test.sh", ".ci/run"])
def test_the_test_command_and_ci(command: str, case: str, tmp_path: Path) -> None:
    """The README's second command (and CI's, which runs it strict) exits 0 only when every check passed: pytest
    (its "no tests" 5 fails too), and on a whole run the coverage floor; it runs lint, the strict documentation
    build and pytest in parallel workers, with GlusterFS selected."""
    rc, total, args, passes = CASES[case]
    tree = stubbed_tree(tmp_path / "tree")
    log = tmp_path / "log"
    env = {"STUB_LOG": str(log), "STUB_PYTEST_RC": str(rc), "STUB_COVERAGE": total, "FSGUARD_TESTS_SETUP": "0"}
    env.update({"FSGUARD_TESTS_STRICT": "", "FSGUARD_TESTS_BACKENDS": "", "FSGUARD_TESTS_WORKERS": "3"})
    done = subprocess.run(
        ["bash", command, *args], cwd=tree, env=clean_env(env), capture_output=True, text=True, timeout=60
    )
    assert (done.returncode == 0) == passes, (done.returncode, done.stdout, done.stderr)
    calls = log.read_text().splitlines()
    assert calls[0] == "lint", calls
    assert any(" -m sphinx -W " in call for call in calls), calls
    (pytest_call,) = [call for call in calls if "coverage run -m pytest" in call]
    assert pytest_call.endswith(" ".join(["-n", "3", "--dist", "loadgroup", "--no-loadscope-reorder", *args])), calls
    strict = "1" if command == ".ci/run" else ""
    assert pytest_call.startswith(f"STRICT={strict} BACKENDS=juicefs,glusterfs -m coverage run"), pytest_call
