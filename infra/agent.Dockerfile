# The agent image (production): Python, git and the kswarm package; nothing else, no secrets.
# Build from the repository root:  docker build -f infra/agent.Dockerfile -t kswarm/agent .
# Use it with `docker: {image: kswarm/agent, host_shared: false}` in swarm.yaml.
# The orchestrator runs it read-only, network_mode none, as a per-agent uid, with the gateway socket
# directory at /kswarm/run and four volumes at /kswarm/{home,work,memory,history}.
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

# Mount points exist in the image so that a read-only root still has them.
RUN mkdir -p /kswarm/home /kswarm/work /kswarm/memory /kswarm/history /kswarm/run

ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HOME=/kswarm/home
# Overridden per agent by the orchestrator (uid_base + k); never root.
USER 20000:20000
WORKDIR /kswarm/work
CMD ["python", "-m", "agents"]
