"""Device allocation on one node and the fair choice of the next job.

``DeviceAllocator`` owns the devices of one node (one worker serves a node; the gateway's node lease
keeps it that way). A job gets all of its N devices on that node or nothing (gang allocation), and a
device is never held by two jobs. ``choose_lane`` picks which waiting job goes next: reproductions first,
then the submitter served least recently, so one agent's 50 queued jobs cannot starve another agent's
one. The choice is strict: if the chosen job does not fit the free devices, nothing smaller jumps ahead
of it (a big gang job is never starved by a stream of small ones).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Allocation:
    """Devices one job holds on one node."""

    job_id: str
    node: str
    devices: tuple[int, ...]

    def env(self, visible_var: str | None, inside_container: bool = False) -> dict[str, str]:
        """The visible-device variable for the job (renumbered from 0 inside a GPU container)."""
        if visible_var is None:
            return {}
        ids = range(len(self.devices)) if inside_container else self.devices
        return {visible_var: ",".join(str(i) for i in ids)}


class AllocationError(RuntimeError):
    pass


class DeviceAllocator:
    """The devices of one node; not thread-safe (one asyncio worker owns it)."""

    def __init__(self, node: str, devices: Iterable[int]) -> None:
        self.node = node
        self.devices: tuple[int, ...] = tuple(sorted(set(devices)))
        self._free: set[int] = set(self.devices)
        self._held: dict[str, tuple[int, ...]] = {}

    def free_count(self) -> int:
        return len(self._free)

    def free_ids(self) -> list[int]:
        return sorted(self._free)

    def holders(self) -> dict[int, str]:
        """Device id -> job id, for every held device."""
        return {d: job for job, devs in self._held.items() for d in devs}

    def held(self, job_id: str) -> tuple[int, ...] | None:
        return self._held.get(job_id)

    def allocate(self, job_id: str, count: int) -> Allocation | None:
        """All ``count`` devices on this node, lowest ids first, or None when they are not free."""
        if job_id in self._held:
            raise AllocationError(f"job {job_id} already holds devices {self._held[job_id]}")
        if count < 0 or count > len(self.devices):
            raise AllocationError(f"node {self.node} has {len(self.devices)} devices; asked for {count}")
        if count > len(self._free):
            return None
        chosen = tuple(sorted(self._free)[:count])
        self._free.difference_update(chosen)
        self._held[job_id] = chosen
        return Allocation(job_id=job_id, node=self.node, devices=chosen)

    def release(self, job_id: str) -> None:
        devices = self._held.pop(job_id, ())
        self._free.update(devices)


@dataclass(frozen=True)
class LaneHead:
    """The next undelivered job of one lane (one submitter's queue at one priority) of a pool."""

    lane: str
    priority: int  # 0 = reproduction or retry, 1 = normal
    submitter: str
    entry: str  # stream entry id of the head job
    job_id: str
    devices: int
    running: int  # the submitter's running jobs in the pool
    served: int  # serial of the submitter's last start in the pool (0 = never)


def _entry_key(entry: str) -> tuple[int, int]:
    ms, _, seq = entry.partition("-")
    return int(ms), int(seq or 0)


def fair_order(heads: Sequence[LaneHead], max_running: int) -> list[LaneHead]:
    """Eligible lanes in the order they should be served."""
    eligible = [h for h in heads if h.running < max_running]
    return sorted(eligible, key=lambda h: (h.priority, h.served, _entry_key(h.entry), h.lane))


def choose_lane(
    heads: Sequence[LaneHead], free_devices: int, max_running: int, node_capacity: int | None = None
) -> LaneHead | None:
    """The lane to take from now, or None (nothing eligible, or the first in line does not fit yet).

    Jobs larger than this node (``node_capacity``) are left to bigger nodes of the pool."""
    order = [h for h in fair_order(heads, max_running) if node_capacity is None or h.devices <= node_capacity]
    if not order:
        return None
    first = order[0]
    return first if first.devices <= free_devices else None
