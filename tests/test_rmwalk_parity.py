"""fsguard's checked rmtree walk (``fsguard/rmwalk/``) against the standard ``rmtree``, outside any race.

The walk runs the standard library's own ``rmtree`` code with fsguard's ``os.open``/``unlink``/``rmdir``/
``close``; every handler must still be told ``os.open``, ``os.unlink``, ``os.rmdir`` (the functions of ``os``
at that moment, as the standard code looks them up), with the same paths and exceptions, and an unhandled
error must be the same exception with no ``__context__``. Each scenario runs in a fresh interpreter with
``FSGUARD=force`` and with ``FSGUARD=0``, and the two transcripts must be equal. Failures are made by swapping
a function of ``os`` (as CPython's own ``test_shutil`` does), since as root permissions do not fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_python

SCENARIO = """
    import json, os, shutil, sys, tempfile
    scenario = os.environ["SCENARIO"]
    root = tempfile.mkdtemp()
    top = os.path.join(root, "t")
    os.makedirs(os.path.join(top, "sub"))
    for name in ("f1", "f2", os.path.join("sub", "f3")):
        open(os.path.join(top, name), "w").close()
    os.symlink(top, os.path.join(root, "link"))
    calls = []
    real = {n: getattr(os, n) for n in ("open", "unlink", "rmdir")}

    def failing(name, which):
        def fake(path, *args, **kwargs):
            if os.fsdecode(path).endswith(which):
                raise PermissionError(13, "Permission denied (test)", path)
            return real[name](path, *args, **kwargs)
        return fake

    def describe(func):
        for n in ("open", "unlink", "rmdir", "close", "lstat", "scandir"):
            if func is getattr(os, n):
                return "os." + n
        return getattr(func, "__qualname__", repr(func))

    def onerror(func, path, exc_info):
        calls.append(["onerror", describe(func), os.fsdecode(path).replace(root, "<root>"),
                      exc_info[0].__name__, getattr(exc_info[1], "errno", None)])

    def onexc(func, path, exc):
        calls.append(["onexc", describe(func), os.fsdecode(path).replace(root, "<root>"), type(exc).__name__,
                      getattr(exc, "errno", None), os.fsdecode(exc.filename or "").replace(root, "<root>")])

    def vanishing():  # the first removal also removes its siblings, as another thread of this process might
        def fake(path, *args, **kwargs):
            if os.path.basename(os.fsdecode(path)) in ("f1", "f2") and os.path.exists(os.path.join(top, "f1")):
                for other in {"f1", "f2"} - {os.path.basename(os.fsdecode(path))}:
                    real["unlink"](os.path.join(top, other))
            return real["unlink"](path, *args, **kwargs)
        return fake

    kind, _, handler = scenario.partition(":")
    kwargs = {"onerror": onerror} if handler == "onerror" else {"onexc": onexc} if handler == "onexc" else {}
    target = top
    if kind == "unlink":
        os.unlink = failing("unlink", "f2")
    elif kind == "open":
        os.open = failing("open", "sub")
    elif kind == "rmdir":
        os.rmdir = failing("rmdir", "sub")
    elif kind == "vanish":
        os.unlink = vanishing()
    elif kind == "symlink":
        target = os.path.join(root, "link")
    elif kind == "bytes":
        target = os.fsencode(top)
    elif kind == "dir_fd":
        fd = os.open(root, os.O_RDONLY)
        kwargs["dir_fd"], target = fd, "t"
    try:
        result = shutil.rmtree(target, **kwargs)
        outcome = ["ok", repr(result)]
    except Exception as error:
        outcome = [type(error).__name__, getattr(error, "errno", None),
                   os.fsdecode(getattr(error, "filename", None) or "").replace(root, "<root>"),
                   error.__context__ is None, error.__cause__ is None]
    for name, function in real.items():
        setattr(os, name, function)
    left = sorted(os.path.relpath(os.path.join(d, f), root) for d, ds, fs in os.walk(root) for f in ds + fs)
    print(json.dumps({"outcome": outcome, "calls": calls, "left": left,
                      "patched": hasattr(shutil.rmtree, "__wrapped__")}))
"""

# "vanish": an entry listed a moment ago is gone (another thread of this lone process removed it). Alone, no peer
# did it: the standard error, at once (a settle wait of FSGUARD_SETTLE_S=600 would run the test into its timeout).
KINDS = ["unlink", "open", "rmdir", "vanish", "symlink", "bytes", "dir_fd", "plain"]


HANDLERS = ["none", "onerror", "onexc"]
PROBE = "import shutil, sys; print(sys.version_info >= (3, 12), 'dir_fd' in (shutil.rmtree.__kwdefaults__ or {}))"


@pytest.mark.parametrize("handler", HANDLERS)
@pytest.mark.parametrize("kind", KINDS)
def test_checked_walk_matches_the_standard_rmtree(fsguard_python: Path, kind: str, handler: str) -> None:
    check(fsguard_python, kind, handler)


def check(python: Path, kind: str, handler: str) -> None:
    """One scenario under ``python`` (this suite's, or another version's: ``tests/test_versions.py`` runs these rows
    under 3.10, 3.12+, where the onexc rows really run)."""
    onexc, dir_fd = run_python(python, PROBE).stdout.split()
    if handler == "onexc" and onexc != "True":
        pytest.skip("shutil.rmtree has no onexc before Python 3.12")
    if kind == "dir_fd" and dir_fd != "True":
        pytest.skip("shutil.rmtree has no dir_fd before Python 3.11")
    runs = {}
    for mode in ("force", "0"):
        env = {"FSGUARD": mode, "SCENARIO": f"{kind}:{handler}", "FSGUARD_SETTLE_S": "600"}
        done = run_python(python, SCENARIO, env)
        assert done.returncode == 0, done.stderr
        runs[mode] = json.loads(done.stdout)
        assert "fsguard: " not in done.stderr, done.stderr  # nothing to record outside a race
    force, off = runs["force"], runs["0"]
    assert force["patched"] and not off["patched"]
    force.pop("patched"), off.pop("patched")
    assert force == off
    if kind in ("unlink", "open", "rmdir") and handler != "none":
        assert force["calls"], "the handler was never called"
