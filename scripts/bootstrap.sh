#!/usr/bin/env bash
# Create .venv (if missing) and install kaudit with pinned dependencies. Idempotent and quick when done.
set -euo pipefail
cd "$(dirname "$0")/.."
# Headless Chromium for the browser tests (Debian's package; Playwright drives it, never downloads one).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo -n"; fi
  if [ -z "$SUDO" ] || $SUDO true 2>/dev/null; then
    echo "bootstrap: installing Debian's chromium for the browser tests" >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null
  else
    echo "bootstrap: no chromium and no root: install Debian's chromium (apt-get install chromium) or the browser tests fail" >&2
  fi
fi
# bubblewrap: regrades refuse to run untrusted code without it (graders/sandbox.py).
if ! command -v bwrap >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "bootstrap: installing Debian's bubblewrap for the regrade sandbox" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends bubblewrap >/dev/null
fi
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
