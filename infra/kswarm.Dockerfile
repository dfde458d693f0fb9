# The service image: the gateway, the orchestrator, Redis and the compose helpers (compose.yaml).
# Build every image with `kswarm images build` (it makes the base where no registry serves it and
# streams the build context itself); by hand, from the repository root:
#   docker build --network host -f infra/kswarm.Dockerfile -t kswarm/kswarm .
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

# redis-server: compose's Redis runs from this image too (nothing is pulled from a registry).
# bubblewrap: the sandbox's preferred implementation (docs/sandbox.md).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv git ca-certificates redis-server bubblewrap \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/kswarm \
 && ln -s /opt/kswarm/bin/python /usr/local/bin/python

# For builds behind a mirror or a TLS-inspecting proxy (visible to pip during the build only).
ARG PIP_INDEX_URL
ARG PIP_CERT
WORKDIR /opt/kswarm-src
# The dependencies first, from pyproject.toml alone: a layer that survives every change of the code.
COPY pyproject.toml README.md ./
RUN mkdir gateway orchestrator agents && touch gateway/__init__.py orchestrator/__init__.py agents/__init__.py \
 && /opt/kswarm/bin/pip install --no-cache-dir --disable-pip-version-check ".[server]" \
 && /opt/kswarm/bin/pip uninstall -y -q kswarm && rm -rf /opt/kswarm-src/*
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY orchestrator ./orchestrator
COPY agents ./agents
COPY kswarm_contracts ./kswarm_contracts
RUN /opt/kswarm/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps . \
 && rm -rf /opt/kswarm-src \
 # A symlink to the venv's python is not the venv (Python finds pyvenv.cfg beside the path it was
 # started by): `python` anywhere is a wrapper that execs the venv's, as in the agent image.
 && rm -f /usr/local/bin/python \
 && printf '#!/bin/sh\nexec /opt/kswarm/bin/python "$@"\n' > /usr/local/bin/python \
 && chmod 755 /usr/local/bin/python \
 && ln -s /opt/kswarm/bin/kswarm /usr/local/bin/kswarm
COPY infra/compose /opt/kswarm/compose

ENV PATH=/opt/kswarm/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 KSWARM_HOME=/var/lib/kswarm
WORKDIR /var/lib/kswarm
CMD ["kswarm", "--help"]
