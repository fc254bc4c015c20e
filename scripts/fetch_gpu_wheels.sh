#!/usr/bin/env bash
# Fill .whl/ (git-ignored) with what the H200 image lacks for the worker path of the GPU lane:
# the service's wheels for CPython 3.12 (the image's python3) and Debian's bubblewrap .deb.
# Then call the device with carry [".whl"]; scripts/gpu_lane_regrade.sh installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
mkdir -p .whl/deb
pins=$(grep -iE '^(fastapi|starlette|pydantic|pydantic-core|pydantic_core|pydantic-settings|SQLAlchemy|alembic|typer|python-multipart|annotated-doc|annotated-types|typing-inspection|python-dotenv|Mako|greenlet|uvicorn|prometheus_client|tenacity|opentelemetry-api)==' constraints.txt)
for pin in $pins; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$pin"
done
(cd .whl/deb && { apt-get download bubblewrap 2>/dev/null || { apt-get update -qq && apt-get download bubblewrap; }; })
# CUTLASS's source tree for declared build dependencies (scripts/gpu_lane_real.sh unpacks it): PyPI's
# nvidia-cutlass wheel carries include/, tools/util/include and examples/ under cutlass_library/source.
# In .whl/deps, not .whl: it is never pip-installed.
mkdir -p .whl/deps
"$PY" -m pip download -q --no-deps -d .whl/deps "nvidia-cutlass==4.2.0.0" || echo "nvidia-cutlass not fetched"

ls .whl .whl/deb
