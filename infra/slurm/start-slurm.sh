#!/usr/bin/env bash
# Start a private single-node Slurm (munged + slurmctld + slurmd) on loopback with fake GPUs.
# Idempotent. Installs Debian's slurm-wlm and munge when missing (apt-get update once first) unless
# KSWARM_SLURM_NO_INSTALL=1. Prints the SLURM_CONF to export on stdout; exits non-zero (reason on
# stderr) when Slurm cannot be started. Stop it with stop-slurm.sh (by pid files).
#   KSWARM_SLURM_DIR    state dir (default /var/lib/kswarm-slurm)
#   KSWARM_SLURM_GPUS   fake GPUs on the node (default 8)
#   KSWARM_SLURM_PORT   slurmctld port; slurmd uses PORT+1 (default 6817)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DIR="${KSWARM_SLURM_DIR:-/var/lib/kswarm-slurm}"
GPUS="${KSWARM_SLURM_GPUS:-8}"
CTLD_PORT="${KSWARM_SLURM_PORT:-6817}"
SLURMD_PORT=$((CTLD_PORT + 1))
CONF="$DIR/slurm.conf"
export SLURM_CONF="$CONF"

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

if alive "$DIR/munge/munged.pid" && alive "$DIR/slurmctld.pid" && alive "$DIR/slurmd.pid" \
    && sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
  echo "$CONF"; exit 0
fi

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  if [ "${KSWARM_SLURM_NO_INSTALL:-0}" = 1 ]; then echo "slurm-wlm/munge missing (install disabled)" >&2; exit 2; fi
  if [ "$(id -u)" != 0 ]; then echo "slurm-wlm/munge missing and not root: cannot install" >&2; exit 2; fi
  echo "installing slurm-wlm munge ..." >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      slurm-wlm munge >/dev/null) >&2 || { echo "apt-get install slurm-wlm munge failed" >&2; exit 2; }
fi
if [ "$(id -u)" != 0 ]; then echo "Slurm here runs as root (SlurmUser=root, mknod): run as root" >&2; exit 2; fi

# Stop leftovers of an earlier half-started run (by pid file only).
"$HERE/stop-slurm.sh" >/dev/null 2>&1 || true

HOST="$(hostname -s)"
CPUS="$(nproc)"
mkdir -p "$DIR/state" "$DIR/spool" "$DIR/dev" "$DIR/munge"
chmod 700 "$DIR/munge"
for i in $(seq 0 $((GPUS - 1))); do
  [ -c "$DIR/dev/nvidia$i" ] || { rm -f "$DIR/dev/nvidia$i"; mknod "$DIR/dev/nvidia$i" c 1 3; }
done
render() {
  sed -e "s|@HOST@|$HOST|g" -e "s|@DIR@|$DIR|g" -e "s|@CPUS@|$CPUS|g" -e "s|@GPUS@|$GPUS|g" \
      -e "s|@LAST_GPU@|$((GPUS - 1))|g" -e "s|@MEMORY_MB@|1024|g" \
      -e "s|@CTLD_PORT@|$CTLD_PORT|g" -e "s|@SLURMD_PORT@|$SLURMD_PORT|g" "$1"
}
render "$HERE/slurm.conf.template" > "$CONF"
render "$HERE/gres.conf.template" > "$DIR/gres.conf"

# munge: a private key and socket, so nothing depends on the system's munge service.
if [ ! -s "$DIR/munge/munge.key" ]; then
  dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  chmod 600 "$DIR/munge/munge.key"
fi
munged --force --socket="$DIR/munge/munge.sock" --key-file="$DIR/munge/munge.key" \
  --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/munged.seed"

# Daemons detach themselves and write pid files; -i ignores state of an earlier run's jobs.
slurmctld -f "$CONF" -i
slurmd -f "$CONF" -N "$HOST"

for _ in $(seq 1 150); do
  state="$(sinfo -h -o %T 2>/dev/null | head -n1 || true)"
  case "$state" in
    idle|mixed|allocated) echo "$CONF"; exit 0 ;;
    down*|drain*|fail*) scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true ;;
  esac
  sleep 0.2
done
echo "slurm did not become ready in 30 s (node state: ${state:-none}); last log lines:" >&2
tail -n 15 "$DIR/slurmctld.log" "$DIR/slurmd.log" >&2 || true
exit 3
