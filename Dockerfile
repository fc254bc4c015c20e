# kaudit: API and worker image (CPU torch; for GPU workers base this on a CUDA image instead).
# Not built in the development sandbox (no docker engine there); see docs/service.md.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    KAUDIT_DATA_DIR=/data KAUDIT_HOST=0.0.0.0 KAUDIT_PORT=8000
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 kaudit
WORKDIR /app
COPY pyproject.toml constraints.txt README.md alembic.ini ./
COPY service ./service
COPY ingest ./ingest
COPY audit_rules ./audit_rules
COPY graders ./graders
COPY kernels ./kernels
COPY migrations ./migrations
RUN pip install -c constraints.txt -e . \
    && mkdir -p /data && chown kaudit:kaudit /data
USER kaudit
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz').status != 200)"
# `kaudit serve` runs `alembic upgrade head` first (KAUDIT_AUTO_MIGRATE, default on).
CMD ["kaudit", "serve"]
