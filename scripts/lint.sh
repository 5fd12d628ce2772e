#!/usr/bin/env bash
# Lint, format and type checks; scripts/test.sh runs this before the tests. Needs .venv (scripts/test.sh makes it).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=.venv/bin
status=0
"$bin/ruff" check fsguard tests bench docs || status=1
"$bin/ruff" format --check fsguard tests bench docs || status=1
"$bin/mypy" || status=1   # files, strictness and target version come from pyproject.toml
[ $status -eq 0 ] && echo "scripts/lint.sh: ruff and mypy --strict clean"
exit $status
