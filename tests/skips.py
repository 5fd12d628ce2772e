"""The one reviewed list of skips CI accepts (issue 48).

Under ``FSGUARD_TESTS_STRICT=1`` (``.ci/run`` sets it) every skipped test fails, unless its reason matches an
entry here (``tests/conftest.py``): a new way of skipping fails CI until it is reviewed and listed, with why it
may skip in CI. An entry is a regular expression searched in the skip's reason -> why that skip is acceptable.
Anything CI must really run (FUSE, unshare, JuiceFS, GlusterFS, mpirun, SLURM, chromium, the other CPythons, wrapt
in their venvs, the storm, xattrs, the 'nobody' group) is not listed: its skip fails CI.
"""

from __future__ import annotations

import re

ALLOWED: dict[str, str] = {
    # A row of a feature the interpreter running it lacks: the same rows run on the versions that have it.
    r"shutil\.rmtree has no onexc (before Python 3\.12|on Python 3\.1[01])": (
        "onexc rows need 3.12+: pytest runs on 3.11; tests/test_versions.py runs them on 3.12, 3.13 and 3.15"
    ),
    r"shutil\.rmtree has no dir_fd (before Python 3\.11|on Python 3\.10)": (
        "dir_fd rows need 3.11+: they run under pytest's 3.11 and the newer versions of tests/test_versions.py"
    ),
    r"except\* is Python 3\.11\+": "except* is 3.11+ syntax: runs under pytest's 3.11",
    r"CPython 3\.1[0-4] runs no \.start files \(PEP 829: 3\.15\+\)": (
        "the .start rows need 3.15+: tests/test_versions.py runs them on 3.15 (scripts/get-python.sh)"
    ),
    # Backends CI does not select (tests/test_cluster_backends.py, FSGUARD_TESTS_BACKENDS).
    r"^moosefs not in FSGUARD_TESTS_BACKENDS": (
        "MooseFS is not installed by scripts/test.sh (Debian's moosefs-* packages): run with "
        "FSGUARD_TESTS_BACKENDS=juicefs,moosefs where it is"
    ),
    r"hf_trainer_job\.py not in FSGUARD_TESTS_BACKEND_SCRIPTS": (
        "the Trainer job on a distributed filesystem is a long opt-in run (FSGUARD_TESTS_BACKEND_SCRIPTS)"
    ),
    # Chance or the machine, not a missing install: the test says why, with what it saw.
    r"the freed inode number went to another process's directory this time": (
        "a freed inode number is reused by whichever process asks first: nothing to show this time"
    ),
    r"does not reuse a freed directory inode at once \(tmpfs\)": (
        "the temp directory's filesystem decides whether inodes are reused at once; nothing to show on tmpfs"
    ),
    r"^fails without fsguard too:": (
        "a CPython test suite that fails without fsguard on this machine says nothing of fsguard (both summaries shown)"
    ),
    r"has no wrapt in its own site-packages": (
        "pip install --user with wrapt in the system site: only where the base interpreter has wrapt"
    ),
}

_COMPILED = [(re.compile(pattern), why) for pattern, why in ALLOWED.items()]


def why_allowed(reason: str) -> str | None:
    """Why a skip with this reason is acceptable in CI, or None: it is not, and fails there."""
    for pattern, why in _COMPILED:
        if pattern.search(reason):
            return why
    return None


def reason_of(longrepr: object) -> str:
    """The reason of a skip report (pytest's ``(file, line, "Skipped: reason")``)."""
    text = str(longrepr[2] if isinstance(longrepr, tuple) else longrepr)
    return text.removeprefix("Skipped: ")
