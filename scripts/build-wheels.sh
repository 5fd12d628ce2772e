#!/usr/bin/env bash
# Build fsguard's two wheels into dist/ (or $1): the one for CPython 3.10-3.17 (fsguard.pth alone, tagged
# py310...py317) and the one for 3.18+ (fsguard.pth and fsguard.start, py3). See hatch_build.py; publish both.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-dist}"
PY="${PYTHON:-.venv/bin/python}"
for flavour in pth start; do
    FSGUARD_WHEEL=$flavour "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$OUT" .
done
ls "$OUT"/fsguard-*.whl
