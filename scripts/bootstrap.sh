#!/usr/bin/env bash
# Create .venv (if missing) and install kaudit with pinned dependencies. Idempotent and quick when done.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.kaudit-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # torch==2.13.0 resolves to the local CPU wheel on this kind of machine (see README).
  .venv/bin/python -m pip install -q -c constraints.txt -e '.[dev]'
  touch "$stamp"
fi
