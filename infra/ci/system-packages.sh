#!/usr/bin/env bash
# Install the Debian packages the tests need, only those missing (apt-get update at most once).
set -euo pipefail
need=()
command -v git >/dev/null 2>&1 || need+=(git)
# A system Redis 7.x beside the bundled 6.2, so both versions are tested.
[ -x /usr/bin/redis-server ] || need+=(redis-server)
# The Docker daemon (started by dockerd-start.sh) and compose, for `docker-compose config`.
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
# The UI tests drive Debian's Chromium with Playwright (no browser download is possible here).
[ -x /usr/bin/chromium ] || need+=(chromium)
# The sandbox's preferred implementation (orchestrator/sandbox/bubblewrap.py; docs/sandbox.md).
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
# The images' base where no registry serves debian:bookworm-slim (infra/ci/base-image.sh).
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
# promtool checks and unit-tests the alert rules of infra/prometheus/ (tests/test_monitoring_config.py).
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "missing packages (${need[*]}) and not root: install them with apt-get" >&2; exit 2
fi
echo "installing ${need[*]} ..." >&2
apt-get update -qq
# No packaged service starts during the install (redis-server, prometheus: they would listen beyond
# loopback, if only for a moment): Debian's invoke-rc.d asks policy-rc.d, and 101 means "not now".
# A policy the machine already has is left as it is.
own_policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && own_policy=1
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
  || { [ -n "$own_policy" ] && rm -f /usr/sbin/policy-rc.d; exit 1; }
[ -n "$own_policy" ] && rm -f /usr/sbin/policy-rc.d
# And none starts at boot either: the tests start their own servers.
if [[ " ${need[*]} " == *" redis-server "* ]] && command -v systemctl >/dev/null 2>&1; then
  systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
# Likewise its prometheus service: only promtool is wanted.
if [[ " ${need[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null 2>&1; then
  systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
