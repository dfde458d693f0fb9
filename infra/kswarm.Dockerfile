# The service image for the gateway, the orchestrator and the job workers (see compose.yaml).
# Build from the repository root:  docker build -f infra/kswarm.Dockerfile -t kswarm/kswarm .
FROM python:3.11-slim

RUN apt-get update \
 && apt-get install -y --no-install-recommends git ca-certificates \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/kswarm-src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY orchestrator ./orchestrator
COPY agents ./agents
RUN pip install --no-cache-dir . && rm -rf /opt/kswarm-src

ENV PYTHONUNBUFFERED=1
WORKDIR /var/lib/kswarm
CMD ["kswarm", "--help"]
