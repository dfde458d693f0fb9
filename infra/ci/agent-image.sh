#!/usr/bin/env bash
# Build the production agent image (infra/agent.Dockerfile) here, where no registry serves images:
# the debian:bookworm-slim base is debootstrapped from the Debian mirror (once; kept in the daemon),
# with this machine's CA bundle (a TLS-inspecting proxy's CA, if any) so that the build's pip trusts it.
# Usage: infra/ci/agent-image.sh [TAG]   (DOCKER_HOST as for the tests; prints the tag when done)
set -euo pipefail
TAG="${1:-kswarm/agent:latest}"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
BASE=debian:bookworm-slim
MIRROR="${KSWARM_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
CA=/etc/ssl/certs/ca-certificates.crt

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  DEBOOTSTRAP="$(command -v debootstrap || echo /usr/sbin/debootstrap)"
  [ -x "$DEBOOTSTRAP" ] || { echo "debootstrap missing: run infra/ci/system-packages.sh" >&2; exit 2; }
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  echo "debootstrapping $BASE from $MIRROR ..." >&2
  "$DEBOOTSTRAP" --variant=minbase --include=ca-certificates bookworm "$work/root" "$MIRROR" \
    >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; exit 3; }
  if [ -f "$CA" ]; then
    cp "$CA" "$work/root/usr/local/share/ca-certificates/host-ca-bundle.crt"
    cp "$CA" "$work/root/etc/ssl/certs/ca-certificates.crt"
  fi
  rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
  tar -C "$work/root" -c . | docker import - "$BASE" >/dev/null
fi
echo "building $TAG from infra/agent.Dockerfile ..." >&2
docker build --network host -q -f "$REPO/infra/agent.Dockerfile" \
  --build-arg PIP_CERT="$CA" -t "$TAG" "$REPO" >&2
echo "$TAG"
