#!/usr/bin/env bash
# One command: install (first time) and run kaudit on the embedded default:
# SQLite file + local blob directory under ./data, in-process worker. Nothing else to start.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export KAUDIT_DATA_DIR=${KAUDIT_DATA_DIR:-$PWD/data}
exec .venv/bin/kaudit serve "$@"
