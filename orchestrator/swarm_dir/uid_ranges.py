"""Machine-wide agent uid ranges: one block per ``$KSWARM_HOME``, so two swarms never share a uid.

Stopping a uid-isolated agent kills every process of its uid (that is how a child that fled the process
group is caught), so two swarms on one machine must never hand out the same uid. A spec may pin
``uid_base``; otherwise each swarm dir gets a block of ``BLOCK`` uids from a registry shared by every
kswarm on the machine (``/var/lib/kswarm/uid-ranges.json`` as root; ``KSWARM_UID_REGISTRY`` overrides).
The registry maps the swarm dir's real path to its block and is guarded by ``flock``; a block whose dir
no longer exists is handed out again once no process runs as one of its uids (``kswarm down --purge``
keeps the dir, and so its block); a block that processes run in is never handed out, whoever started
them (a compose deployment's orchestrator allocates from a registry of its own, inside its container).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

FIRST_UID = 500_000  # above the usual /etc/subuid ranges (100000 + 65536 per user) of a few users
BLOCK = 1_000  # uids per swarm dir: the most agents one swarm can ever have had
BLOCKS = 10_000


def registry_path() -> Path:
    explicit = os.environ.get("KSWARM_UID_REGISTRY")
    if explicit:
        return Path(explicit)
    if os.geteuid() == 0:
        return Path("/var/lib/kswarm/uid-ranges.json")
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return state / "kswarm" / "uid-ranges.json"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[dict[str, int]]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            try:
                table: dict[str, int] = json.loads(path.read_text())
            except (OSError, ValueError):
                table = {}
            before = dict(table)
            yield table
            if table != before:
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
                tmp.replace(path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def process_owners() -> Iterator[tuple[int, int]]:
    """(pid, uid) of every live process now, from the owners of /proc/<pid>. Zombies are left out: an
    exited process waiting for its reaper (bubblewrap's init, orphaned to the host's pid 1) runs nothing
    and must keep neither a uid nor a block taken."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                uid = entry.stat().st_uid
                stat = (entry / "stat").read_text()
            except OSError:  # gone meanwhile
                continue
            if stat[stat.rindex(")") + 2 :][:1] not in ("Z", "X"):
                yield int(entry.name), uid


def blocks_in_use() -> set[int]:
    """Blocks of which some process runs right now."""
    return {(uid - FIRST_UID) // BLOCK for _, uid in process_owners() if uid >= FIRST_UID}


def uid_base_for(swarm_dir: Path, registry: Path | None = None) -> int:
    """The first uid of ``swarm_dir``'s block, allocated on first use and stable afterwards."""
    key = str(swarm_dir.resolve())
    with _locked(registry or registry_path()) as table:
        if key not in table:
            running = blocks_in_use()
            # A block is free again only when its dir is gone and no process runs as one of its uids.
            stale = [o for o, b in table.items() if not Path(o).exists() and b not in running]
            for owner in stale:
                del table[owner]
            # Nor is a block some process runs in now that this registry does not know of: another
            # registry's swarm (a compose deployment's orchestrator keeps its own, in its container).
            live = set(table.values()) | running
            free = next((b for b in range(BLOCKS) if b not in live), None)
            if free is None:
                raise RuntimeError(f"no free agent uid block left in {registry or registry_path()}")
            table[key] = free
        return FIRST_UID + table[key] * BLOCK
