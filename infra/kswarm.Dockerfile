# The service image: the gateway, the orchestrator, Redis and the compose helpers (compose.yaml).
# Build every image with `kswarm images build` (it makes the base where no registry serves it and
# streams the build context itself); by hand, from the repository root:
#   docker build --network host -f infra/kswarm.Dockerfile -t kswarm/kswarm .
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

# redis-server: compose's Redis runs from this image too (nothing is pulled from a registry).
# bubblewrap: the job sandbox's preferred implementation (docs/sandbox.md).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv git ca-certificates redis-server bubblewrap \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/kswarm

WORKDIR /opt/kswarm-src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY orchestrator ./orchestrator
COPY agents ./agents
# For builds behind a mirror or a TLS-inspecting proxy (visible to pip during the build only).
ARG PIP_INDEX_URL
ARG PIP_CERT
RUN /opt/kswarm/bin/pip install --no-cache-dir --disable-pip-version-check . \
 && rm -rf /opt/kswarm-src \
 && ln -s /opt/kswarm/bin/python /usr/local/bin/python \
 && ln -s /opt/kswarm/bin/kswarm /usr/local/bin/kswarm
COPY infra/compose /opt/kswarm/compose

ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 KSWARM_HOME=/var/lib/kswarm
WORKDIR /var/lib/kswarm
CMD ["kswarm", "--help"]
