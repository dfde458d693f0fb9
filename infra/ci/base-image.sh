#!/usr/bin/env bash
# Make the base image every kswarm image builds FROM (debian:bookworm-slim) present in the daemon:
# pulled where a registry serves it, else debootstrapped from the Debian mirror (once; kept in the
# daemon), with this machine's CA bundle (a TLS-inspecting proxy's CA, if any) so that builds trust it.
# Usage: infra/ci/base-image.sh [BASE]   (DOCKER_HOST as for the tests; prints the image name)
set -euo pipefail
BASE="${1:-debian:bookworm-slim}"
MIRROR="${KSWARM_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
CA=/etc/ssl/certs/ca-certificates.crt

if docker image inspect "$BASE" >/dev/null 2>&1; then echo "$BASE"; exit 0; fi
if [ -z "${KSWARM_NO_PULL:-}" ] && timeout 60 docker pull -q "$BASE" >/dev/null 2>&1; then echo "$BASE"; exit 0; fi
[ "$BASE" = debian:bookworm-slim ] || { echo "cannot pull $BASE and only debian:bookworm-slim can be debootstrapped" >&2; exit 2; }
DEBOOTSTRAP="$(command -v debootstrap || echo /usr/sbin/debootstrap)"
[ -x "$DEBOOTSTRAP" ] || { echo "no registry serves $BASE and debootstrap is missing: apt-get install debootstrap (or run infra/ci/system-packages.sh)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "debootstrapping $BASE needs root" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "debootstrapping $BASE from $MIRROR (no registry serves it here) ..." >&2
"$DEBOOTSTRAP" --variant=minbase --include=ca-certificates bookworm "$work/root" "$MIRROR" \
  >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; exit 3; }
if [ -f "$CA" ]; then
  cp "$CA" "$work/root/usr/local/share/ca-certificates/host-ca-bundle.crt"
  cp "$CA" "$work/root/etc/ssl/certs/ca-certificates.crt"
fi
rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
tar -C "$work/root" -c . | docker import - "$BASE" >/dev/null
echo "$BASE"
