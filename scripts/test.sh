#!/usr/bin/env bash
# The one test command (README and .ci/run): installs what the tests need, then runs every check: lint, the
# documentation's strict build, pytest under coverage.
# Debian packages (bindfs, fuse3, openmpi-bin, slurmctld/slurmd/slurm-client, chromium, rsync, glusterfs-server/-client) are installed when missing and we are root; the Python
# test dependencies go into .venv (torch pinned to the CPU build).
set -uo pipefail
cd "$(dirname "$0")/.."

# Setup: what the tests need (FSGUARD_TESTS_SETUP=0 leaves it out: a rerun on a machine already set up, and
# tests/test_first_contact.py, which runs this script with its tools stubbed).
if [ "${FSGUARD_TESTS_SETUP:-1}" != 0 ]; then  # (not indented: the setup steps read as before)
missing=()
command -v bindfs >/dev/null || missing+=(bindfs)
command -v fusermount3 >/dev/null || missing+=(fuse3)  # the tests mount with FUSE 3
command -v mpirun >/dev/null || missing+=(openmpi-bin)
command -v slurmctld >/dev/null || missing+=(slurmctld)  # tests/test_launchers.py: a real SLURM
command -v slurmd >/dev/null || missing+=(slurmd)
command -v srun >/dev/null || missing+=(slurm-client)
command -v nsenter >/dev/null || missing+=(util-linux)
command -v chromium >/dev/null || missing+=(chromium)  # tests/test_report_html.py: the page in a real browser
command -v rsync >/dev/null || missing+=(rsync)  # tests/test_no_trace.py: a rank's output copied with rsync -aX
command -v glusterd >/dev/null || missing+=(glusterfs-server)  # tests/cluster/backends.py: a real GlusterFS
command -v mount.glusterfs >/dev/null || missing+=(glusterfs-client)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "scripts/test.sh: installing Debian packages: ${missing[*]}"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
            || { echo "scripts/test.sh: apt-get install failed" >&2; exit 1; }
    else
        echo "scripts/test.sh: missing ${missing[*]} (not root: tests that need them will skip)" >&2
    fi
fi

# A real CPython 3.15 for tests/test_versions.py (PEP 829's .start files): Debian sid's packages unpacked under
# /opt/python3.15 (scripts/get-python.sh, about a minute). Best effort: without it those tests skip.
if [ "$(id -u)" = 0 ] && ! /opt/python3.15/bin/python3.15 -c pass 2>/dev/null; then
    echo "scripts/test.sh: fetching CPython 3.15 (scripts/get-python.sh)"
    timeout 600 bash scripts/get-python.sh 3.15 >/dev/null \
        || echo "scripts/test.sh: could not get CPython 3.15: its tests in tests/test_versions.py skip" >&2
fi

[ -x .venv/bin/python ] || python3 -m venv .venv || exit 1
DS_BUILD_OPS=0 .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-test.txt || exit 1
fi  # setup

status=0
if [ -f scripts/lint.sh ]; then
    bash scripts/lint.sh || status=1
fi

# The documentation site, strict: any warning (a broken link or cross-reference, a missing page, a directive
# error, an autodoc import failure) fails the run. -E: every page re-read, so no warning hides in a cache.
.venv/bin/python -m sphinx -W --keep-going -E -q -b html docs docs/_build/html \
    && echo "scripts/test.sh: documentation built (docs/_build/html/index.html)" \
    || { echo "scripts/test.sh: documentation build failed (sphinx-build -W)" >&2; status=1; }

# Coverage of fsguard/, including every interpreter the tests start (tests/conftest.py puts a coverage
# start-up hook into the environments it builds; COVERAGE_PROCESS_START switches it on).
# The data directory is world-writable: some tests run workers as user nobody.
rm -rf .coverage-data && mkdir -p .coverage-data && chmod 1777 .coverage-data
export COVERAGE_PROCESS_START="$PWD/pyproject.toml" COVERAGE_FILE="$PWD/.coverage-data/coverage"
# Side by side (issue 48): pytest-xdist workers, --dist loadgroup; tests/support/workers.py says which tests share
# a worker (a module's fixtures, a started service, an xdist_group) and hands the slow ones out first.
# FSGUARD_TESTS_WORKERS: how many (default: one per core, at least 2: most tests wait on processes, FUSE caches and
# launchers more than they compute; 0: one process, as plain pytest). Arguments given here come after, and win.
# GlusterFS runs too (installed above); MooseFS is not installed, and its rows are on tests/skips.py.
export FSGUARD_TESTS_BACKENDS=${FSGUARD_TESTS_BACKENDS:-juicefs,glusterfs}
cores=$(nproc 2>/dev/null || echo 2)
workers=${FSGUARD_TESTS_WORKERS:-$(( cores > 2 ? cores : 2 ))}
parallel=()
[ "$workers" != 0 ] && parallel=(-n "$workers" --dist loadgroup --no-loadscope-reorder)
.venv/bin/python -m coverage run -m pytest "${parallel[@]}" "$@"
rc=$?
if [ $rc -eq 5 ]; then
    echo "scripts/test.sh: pytest collected no tests: failing" >&2
    rc=1
fi
[ $rc -ne 0 ] && status=$rc

# The floor holds for the whole run only: a run of some tests (arguments given) reports its figure, unchecked.
COVERAGE_FLOOR=88
# The reports read a copy of the combined data: coverage's report takes in any data file it finds beside its own, and
# one that a process still wrote after pytest ended warned in CI ("1 file errored").
.venv/bin/python -m coverage combine -q >/dev/null 2>&1
combined="$PWD/.coverage-combined"
rm -f "$combined" && cp "$COVERAGE_FILE" "$combined" 2>/dev/null
if total=$(.venv/bin/python -m coverage report --format=total --data-file="$combined" 2>/dev/null); then
    .venv/bin/python -m coverage report --skip-covered --sort=cover --data-file="$combined" | tail -n 25
    echo "scripts/test.sh: coverage of fsguard/ (all processes): $total%"
    if [ $# -eq 0 ] && ! .venv/bin/python -m coverage report --format=total --fail-under=$COVERAGE_FLOOR \
        --data-file="$combined" >/dev/null; then
        echo "scripts/test.sh: coverage $total% is below the floor of $COVERAGE_FLOOR% (COVERAGE_FLOOR)" >&2
        status=1
    fi
elif [ $# -eq 0 ]; then
    echo "scripts/test.sh: no coverage data: failing" >&2
    status=1
fi
exit $status
