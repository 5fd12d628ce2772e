"""Enabled start-up pays for wrapt's C extension alone (issue 37, ``fsguard/_wrapt.py``), and whatever the
program does with wrapt afterwards works as if fsguard had imported the whole package: ``import wrapt``
gives the complete wrapt, whose ``FunctionWrapper`` is the type fsguard's wrappers are instances of, from
any thread, after a fork, with the extensions disabled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import TORCHRUN_ENV, run_python

ENABLED = {**TORCHRUN_ENV, "FSGUARD": "1"}

# What ``import wrapt`` (2.x) brings that fsguard does not use at start-up.
HEAVY = ("asyncio", "importlib.metadata", "inspect", "wrapt.caching", "wrapt.importer", "wrapt.wrappers")
# What a bare interpreter does not import, and fsguard needs only once the program imports it: shutil (its
# rmtree is wrapped then) with fnmatch, re, bz2, lzma.
LATER = ("shutil", "fnmatch", "re", "bz2", "lzma")

PROGRAM = """
import json, os, sys, threading
patched = hasattr(os.makedirs, "__wrapped__")
before = sorted(m for m in sys.modules if m == "wrapt" or m.startswith("wrapt."))
import wrapt
from wrapt import ObjectProxy, decorator
import wrapt.exceptions, wrapt._wrappers

@decorator
def plus_one(wrapped, instance, args, kwargs):
    return wrapped(*args, **kwargs) + 1

@plus_one
def one():
    return 1

print(json.dumps({
    "patched": patched,
    "before": before,
    "isinstance": isinstance(os.makedirs, wrapt.FunctionWrapper),
    "same_type": wrapt.FunctionWrapper in type(os.makedirs).__mro__,
    "c_type": wrapt.FunctionWrapper is wrapt._wrappers.FunctionWrapper,
    "decorated": one(),
    "proxy": ObjectProxy([1, 2]).__len__(),
    "version": wrapt.__version__,
    "loader": type(wrapt.__spec__.loader).__name__,
    "finders": [type(f).__name__ for f in sys.meta_path],
    "all": all(hasattr(wrapt, name) for name in wrapt.__all__),
}))
"""


def _imported(stderr: str) -> list[str]:
    return [line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if "|" in line]


def test_enabled_startup_imports_wrapts_extension_alone(fsguard_python: Path) -> None:
    # Without coverage's start-up hook (scripts/test.sh sets COVERAGE_PROCESS_START): coverage imports re,
    # inspect and fnmatch itself, which a user's rank does not.
    result = run_python(
        fsguard_python,
        "import os; assert hasattr(os.makedirs, '__wrapped__')",
        {**ENABLED, "COVERAGE_PROCESS_START": ""},
        args=("-X", "importtime"),
    )
    assert result.returncode == 0, result.stderr
    imported = _imported(result.stderr)
    assert "wrapt._wrappers" in imported
    assert "wrapt" not in imported and not [m for m in imported if m in HEAVY + LATER], imported


def test_rmtree_is_wrapped_when_the_program_imports_shutil(fsguard_python: Path) -> None:
    """From every thread importing shutil at once, only ever the guarded rmtree; uninstall restores it."""
    code = """
import sys, threading
assert "shutil" not in sys.modules
import fsguard
assert "rmtree" in fsguard.installed()
start = threading.Barrier(8)
seen = []
def worker():
    start.wait()
    import shutil
    seen.append(hasattr(shutil.rmtree, "__wrapped__"))
threads = [threading.Thread(target=worker) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
import shutil
assert seen == [True] * 8, seen
original = shutil.rmtree.__wrapped__
assert shutil.__spec__.loader is shutil.__loader__ and type(shutil.__loader__).__name__ == "SourceFileLoader"
fsguard.uninstall()
assert shutil.rmtree is original and fsguard.installed() == []
print("ok")
"""
    for _ in range(3):
        result = run_python(fsguard_python, code, ENABLED)
        assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_uninstall_before_shutil_is_imported_leaves_it_alone(fsguard_python: Path) -> None:
    code = """
import sys, fsguard
fsguard.uninstall()
import shutil
assert not hasattr(shutil.rmtree, "__wrapped__") and fsguard.installed() == []
assert "AfterImport" not in [type(f).__name__ for f in sys.meta_path]
print("ok")
"""
    result = run_python(fsguard_python, code, ENABLED)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_a_program_importing_wrapt_gets_the_whole_wrapt(fsguard_python: Path) -> None:
    result = run_python(fsguard_python, PROGRAM, ENABLED)
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout)
    assert state["patched"] and state["before"] == ["wrapt._wrappers", "wrapt.exceptions"]
    assert state["isinstance"] and state["same_type"] and state["c_type"]
    assert (state["decorated"], state["proxy"], state["all"]) == (2, 2, True)
    assert state["version"] == __import__("wrapt").__version__
    assert state["loader"] == "SourceFileLoader" and "_Deferred" not in state["finders"]
    assert result.stderr == ""


def test_wrapt_imported_by_many_threads_at_once(fsguard_python: Path) -> None:
    """Every thread gets the complete module: none sees the package half-executed."""
    code = """
import os, sys, threading
start = threading.Barrier(8)
seen = []
def worker():
    start.wait()
    import wrapt
    seen.append((wrapt.FunctionWrapper is wrapt._wrappers.FunctionWrapper, isinstance(os.makedirs, wrapt.FunctionWrapper),
                 callable(wrapt.decorator), wrapt.lru_cache is not None))
threads = [threading.Thread(target=worker) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
assert seen == [(True, True, True, True)] * 8, seen
print("ok")
"""
    for _ in range(3):
        result = run_python(fsguard_python, code, ENABLED)
        assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_fork_before_the_first_failure_then_import_wrapt(fsguard_python: Path, tmp_path: Path) -> None:
    """A child forked before wrapt's package ran imports it itself; failures are the standard library's."""
    code = f"""
import os, sys
pid = os.fork()
import wrapt
assert isinstance(os.makedirs, wrapt.FunctionWrapper) and wrapt.FunctionWrapper is wrapt._wrappers.FunctionWrapper
try:
    os.makedirs({str(tmp_path)!r})
except FileExistsError as error:
    assert error.filename == {str(tmp_path)!r}
else:
    raise SystemExit("no FileExistsError")
if pid == 0:
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert status == 0, status
print("ok")
"""
    result = run_python(fsguard_python, code, ENABLED)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_with_extensions_disabled_fsguard_uses_the_programs_wrapt(fsguard_python: Path) -> None:
    """``WRAPT_DISABLE_EXTENSIONS``: the program's wrapt is the pure-Python one, and so are fsguard's wrappers."""
    code = """
import os, wrapt
print(isinstance(os.makedirs, wrapt.FunctionWrapper), type(os.makedirs).__mro__[1] is wrapt.FunctionWrapper)
"""
    result = run_python(fsguard_python, code, {**ENABLED, "WRAPT_DISABLE_EXTENSIONS": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]


VENDORED = """
import importlib.util, json, os, sys
vendored = os.environ["VENDORED"]
patched = hasattr(os.makedirs, "__wrapped__")
sys.path.insert(0, vendored)  # the program's own pinned wrapt, first on its import path
found = importlib.util.find_spec("wrapt")
import wrapt

@wrapt.decorator
def plus_one(wrapped, instance, args, kwargs):
    return wrapped(*args, **kwargs) + 1

@plus_one
def one():
    return 1

target = os.path.join(os.environ["OUT"], "made")
os.makedirs(target)  # fsguard's wrapper, still callable
try:
    os.makedirs(target)
except FileExistsError:
    raised = True
else:
    raised = False
import fsguard
inner = os.makedirs.__wrapped__
fsguard.uninstall()
print(json.dumps({
    "patched": patched,
    "version": wrapt.__version__,
    "file": wrapt.__file__,
    "found": found.origin,
    "extension": sys.modules["wrapt._wrappers"].__file__ if "wrapt._wrappers" in sys.modules else None,
    "decorated": one(),
    "raised": raised,
    "unwrapped": os.makedirs is inner and not hasattr(os.makedirs, "__wrapped__"),
}))
"""


def test_a_wrapt_first_on_the_programs_import_path_is_the_one_imported(fsguard_python: Path, tmp_path: Path) -> None:
    """A program that puts its own pinned wrapt (``pip install --target`` of 1.14.1) first on ``sys.path`` imports
    and finds that one, not the site-packages wrapt fsguard's start-up found (issue 46), and fsguard keeps
    working: its wrappers stay callable, an error passes through, ``uninstall`` unwraps them."""
    from tests.support.pinned import pinned_site

    try:
        vendored = pinned_site("wrapt==1.14.1")
    except Exception as error:  # no package index here
        pytest.skip(f"wrapt 1.14.1 cannot be installed: {error}")
    result = run_python(fsguard_python, VENDORED, {**ENABLED, "VENDORED": str(vendored), "OUT": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["patched"] and seen["version"] == "1.14.1", seen
    for key in ("file", "found", "extension"):
        assert seen[key].startswith(str(vendored)), (key, seen)
    assert seen["decorated"] == 2 and seen["raised"] and seen["unwrapped"], seen
