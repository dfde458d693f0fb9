#!/usr/bin/env bash
# Start a private Docker daemon for the tests (idempotent). Installs Debian's docker.io when missing.
# No bridge, no iptables: containers get network_mode none or host only, never a private-range network.
# Prints the DOCKER_HOST to use on stdout; exits non-zero (with the reason on stderr) if no daemon runs.
set -euo pipefail
ROOT="${KSWARM_DOCKERD_ROOT:-/var/lib/kswarm-dockerd}"
SOCK="$ROOT/docker.sock"
PIDFILE="$ROOT/dockerd.pid"
LOG="$ROOT/dockerd.log"
export DOCKER_HOST="unix://$SOCK"

if [ -S "$SOCK" ] && docker version >/dev/null 2>&1; then
  echo "$DOCKER_HOST"; exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then echo "dockerd missing and not root: cannot install docker.io" >&2; exit 2; fi
  echo "installing docker.io ..." >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      docker.io >/dev/null) >&2 || { echo "apt-get install docker.io failed" >&2; exit 2; }
fi
mkdir -p "$ROOT/data" "$ROOT/exec"
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  echo "dockerd pid $(cat "$PIDFILE") runs but does not answer; see $LOG" >&2; exit 3
fi
rm -f "$SOCK" "$PIDFILE"
# setsid: the daemon outlives this script and is stopped by dockerd-stop.sh through its pid file.
setsid dockerd --host "$DOCKER_HOST" --data-root "$ROOT/data" --exec-root "$ROOT/exec" \
  --pidfile "$PIDFILE" --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
  --userland-proxy=false >>"$LOG" 2>&1 < /dev/null &
for _ in $(seq 1 150); do
  if docker version >/dev/null 2>&1; then
    # A fresh start of this private daemon: whatever containers and volumes it still holds are a killed
    # earlier run's (a test stopped mid-way never ran its `down`), and would fail the next run's checks
    # that no other swarm runs here. Images are kept: they are the build cache.
    stale="$(docker ps -aq)"
    [ -z "$stale" ] || { echo "dockerd: removing $(wc -w <<<"$stale") container(s) of an earlier run" >&2
      docker rm -f $stale >/dev/null 2>&1 || true; }
    stale="$(docker volume ls -q)"
    [ -z "$stale" ] || docker volume rm -f $stale >/dev/null 2>&1 || true
    # The empty base image of the host-shared mode (no image can be pulled here).
    if ! docker image inspect kswarm/empty >/dev/null 2>&1; then
      tar cv --files-from /dev/null | docker import - kswarm/empty >/dev/null
    fi
    echo "$DOCKER_HOST"; exit 0
  fi
  sleep 0.2
done
echo "dockerd did not come up in 30 s; last log lines:" >&2
tail -n 20 "$LOG" >&2 || true
exit 3
