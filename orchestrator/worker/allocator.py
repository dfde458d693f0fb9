"""Device allocation on one node, in the worker.

``DeviceAllocator`` owns the devices of one node (one worker serves a node; the gateway's node lease
keeps it that way). A job gets all of its N devices on that node or nothing (gang allocation), and a
device is never held by two jobs. Which job goes next is the gateway's choice (``gateway/jobs/fairness.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
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
