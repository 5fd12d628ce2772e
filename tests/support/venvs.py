"""fsguard's wheel built from the working tree, and fresh venvs with it installed: what ``pip install`` gives.

Tests (``tests/conftest.py``, ``tests/test_versions.py``) and benchmarks (``bench/_common.py``) make theirs here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

from .env import ROOT, clean_env

COVERAGE_START = """\
\"\"\"Starts coverage.py when COVERAGE_PROCESS_START is set (scripts/test.sh sets it), at this interpreter's
first import of fsguard, before any of its code runs. An interpreter that never imports fsguard (FSGUARD=0,
a launcher's agent, a baseline run) has nothing to measure, and pays nothing for coverage.\"\"\"
import os
import sys

WHERE = {where!r}  # where coverage is importable from (None: this environment)


def _start():
    added = WHERE is not None and WHERE not in sys.path
    if added:
        sys.path.append(WHERE)
    try:
        import coverage

        if coverage.process_startup() is not None:
            _pause_in_other_imports()
    except ImportError:
        pass
    finally:
        if added:  # coverage stays loaded; nothing else of that environment leaks in
            sys.path.remove(WHERE)


def _pause_in_other_imports():
    \"\"\"Trace nothing while another package is imported: measuring fsguard does not need torch's or
    transformers' import traced, which costs a third more CPU (issue 48). The pause: the main thread's tracer,
    stopped and started again around an import whose target is not fsguard. Other threads' imports stay traced (paused
    in fsguard's connecting thread, 2 of 6 serialized 16-rank jobs aborted at exit). fsguard code run meanwhile (a
    patched call inside a library's import) goes unmeasured.\"\"\"
    import builtins
    import importlib
    import threading

    def paused(importer, target):
        def wrapper(name, *args, **kwargs):
            tracer = sys.gettrace()
            if (
                tracer is None
                or not hasattr(tracer, "stop")
                or threading.current_thread() is not threading.main_thread()
                or target(name, args, kwargs) == "fsguard"
            ):
                return importer(name, *args, **kwargs)
            tracer.stop()
            try:
                return importer(name, *args, **kwargs)
            finally:
                tracer.start()

        return wrapper

    def statement_target(name, args, kwargs):
        level = kwargs.get("level", args[3] if len(args) > 3 else 0)
        if level:
            scope = kwargs.get("globals", args[0] if args else None) or dict()
            name = scope.get("__package__") or ""
        return name.partition(".")[0]

    def module_target(name, args, kwargs):
        if name.startswith("."):
            name = kwargs.get("package", args[0] if args else None) or ""
        return name.partition(".")[0]

    builtins.__import__ = paused(builtins.__import__, statement_target)
    importlib.import_module = paused(importlib.import_module, module_target)


class _AtFirstImport:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "fsguard":
            sys.meta_path.remove(self)
            _start()
        return None  # the regular finders import it


if os.environ.get("COVERAGE_PROCESS_START"):
    sys.meta_path.insert(0, _AtFirstImport())
"""


def build_wheel(out: Path, flavour: str | None = None) -> Path:
    """fsguard's wheel, built from the working tree into ``out`` (emptied first). ``flavour``: ``pth`` (the
    wheel for 3.10-3.17) or ``start`` (for 3.18+, with ``fsguard.start``); None: the one for this interpreter
    (``hatch_build.py``)."""
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
        check=True,
        env=clean_env({"FSGUARD_WHEEL": flavour} if flavour else None),
    )
    (built,) = out.glob("fsguard-*.whl")
    return built


def purelib(python: Path) -> Path:
    """The site-packages directory of ``python``'s environment."""
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    return Path(out.stdout.strip())


PIP = ("-m", "pip", "--disable-pip-version-check")


def pip_install(python: Path, *requirements: str, timeout: float = 300) -> None:
    """Install with this interpreter's pip into ``python``'s environment (no pip inside it: faster)."""
    subprocess.run(
        [sys.executable, *PIP, "--python", str(python), "install", "-q", "--no-deps", *requirements],
        check=True,
        env=clean_env(),
        capture_output=True,
        timeout=timeout,
    )


def make_venv(
    where: Path, wheel: Path | None, *, wrapt: str = "link", test_deps: bool = False, base: Path | None = None
) -> Path:
    """A fresh venv at ``where``; returns its python.

    ``wheel``: fsguard's wheel to install (None: a venv without fsguard). ``wrapt="link"`` links this
    interpreter's wrapt (the version under test, no network); another value is a pip requirement
    (``wrapt==2.1.*``). ``test_deps``: torch, filelock, coverage... of this environment importable after the
    venv's own packages. ``base``: another interpreter to make it with (``python -m venv``, its own pip:
    this interpreter's pip may not run under a newer Python).
    """
    python = where / "bin" / "python"
    if base is not None:
        shutil.rmtree(where, ignore_errors=True)
        subprocess.run([str(base), "-m", "venv", str(where)], check=True, timeout=300, capture_output=True)
        own = [str(python), *PIP, "install", "-q", "--no-deps"]
        for requirement in [str(wheel)] if wheel is not None else []:
            subprocess.run([*own, requirement], check=True, env=clean_env(), capture_output=True, timeout=300)
        subprocess.run([*own, wrapt], check=True, env=clean_env(), capture_output=True, timeout=300)
        return python
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(where)
    site = purelib(python)
    if wheel is not None:
        pip_install(python, str(wheel), timeout=120)
    if wrapt == "link":
        (site / "wrapt").symlink_to(Path(__import__("wrapt").__file__).parent)
    else:
        pip_install(python, wrapt)
    if test_deps:
        import sysconfig

        (site / "zz_fsguard_testdeps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python


def measure_coverage(site: Path, coverage_dir: str | None) -> None:
    """Measure fsguard in every interpreter of the environment of ``site`` that imports it, from its first
    import on (``.pth`` files run in name order: ``00-fsguard-coverage.pth`` before ``fsguard.pth``).
    ``coverage_dir``: where coverage is importable from (this environment's), or None when the venv has
    coverage installed itself."""
    (site / "_fsguard_coverage_start.py").write_text(COVERAGE_START.format(where=coverage_dir))
    (site / "00-fsguard-coverage.pth").write_text("import _fsguard_coverage_start\n")
