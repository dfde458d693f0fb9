#!/usr/bin/env bash
# Build the production agent image (infra/agent.Dockerfile) here, where no registry serves images:
# the base comes from infra/ci/base-image.sh (pulled, or debootstrapped once), then the real
# `docker build` of the Dockerfile runs (apt and pip inside). `kswarm images build` builds every image.
# Usage: infra/ci/agent-image.sh [TAG]   (DOCKER_HOST as for the tests; prints the tag when done)
set -euo pipefail
TAG="${1:-kswarm/agent:latest}"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
CA=/etc/ssl/certs/ca-certificates.crt
"$REPO/infra/ci/base-image.sh" >/dev/null
echo "building $TAG from infra/agent.Dockerfile ..." >&2
docker build --network host -q -f "$REPO/infra/agent.Dockerfile" \
  --build-arg PIP_CERT="$CA" -t "$TAG" "$REPO" >&2
echo "$TAG"
