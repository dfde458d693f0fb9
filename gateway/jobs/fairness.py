"""The fair choice of the next job of a pool, in the gateway.

``choose_lane`` picks which waiting job goes next: reproductions (and retries) first, then the
submitter served least recently, so one agent's 50 queued jobs cannot starve another agent's one. The
choice is strict: if the chosen job does not fit the free devices, nothing smaller jumps ahead of it
(a big gang job is never starved by a stream of small ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


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
