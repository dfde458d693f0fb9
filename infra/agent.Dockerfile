# The agent image (production): Python, git and the kswarm package; nothing else, no secrets.
# `kswarm images build` builds it with every other image (docs/deploy.md). By hand, from the repository
# root (the build's RUN steps need the Debian and PyPI registries):
#   docker build --network host -f infra/agent.Dockerfile -t kswarm/agent .
#   docker build --network host -f infra/agent.Dockerfile --build-arg EXTRAS=agent,claude -t kswarm/agent .
# It installs the `agent` extra only: the agent and the gateway's client, no FastAPI, Redis, pyarrow or
# docker (tests/test_packaging.py).
# Use it with `docker: {image: kswarm/agent, host_shared: false}` in swarm.yaml.
# The orchestrator runs it read-only, network_mode none, as a per-agent uid, with the gateway socket
# directory at /kswarm/run and four volumes at /kswarm/{home,work,memory,history}.
# Where no registry serves debian:bookworm-slim, infra/ci/base-image.sh debootstraps it first.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv git ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/kswarm

ARG EXTRAS="agent"
# For builds behind a mirror or a TLS-inspecting proxy (visible to pip during the build only).
ARG PIP_INDEX_URL
ARG PIP_CERT
WORKDIR /opt/kswarm-src
# The dependencies first, from pyproject.toml alone: a layer that survives every change of the code.
COPY pyproject.toml README.md ./
RUN mkdir gateway orchestrator agents && touch gateway/__init__.py orchestrator/__init__.py agents/__init__.py \
 && /opt/kswarm/bin/pip install --no-cache-dir --disable-pip-version-check ".[${EXTRAS}]" \
 && /opt/kswarm/bin/pip uninstall -y -q kswarm && rm -rf /opt/kswarm-src/*
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY orchestrator ./orchestrator
COPY agents ./agents
COPY kswarm_contracts ./kswarm_contracts
RUN /opt/kswarm/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps . \
 && rm -rf /opt/kswarm-src \
 # The orchestrator gives agents PATH=/usr/local/bin:/usr/bin:/bin: `python` there is the venv's.
 && printf '#!/bin/sh\nexec /opt/kswarm/bin/python "$@"\n' > /usr/local/bin/python \
 && chmod 755 /usr/local/bin/python \
 # Mount points exist in the image so that a read-only root still has them.
 && mkdir -p /kswarm/home /kswarm/work /kswarm/memory /kswarm/history /kswarm/run

ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HOME=/kswarm/home
# Overridden per agent by the orchestrator (its uid block + k); never root.
USER 20000:20000
WORKDIR /kswarm/work
CMD ["python", "-m", "agents"]
