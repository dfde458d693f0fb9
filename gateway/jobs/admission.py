"""Admission: a submission checked against its pool's rules, refused with ``RuleViolation`` naming the
rule (``single_node``, ``allowed_device_counts``, ``node_capacity``, ``max_timeout_s``, ``kinds``).
``max_queued_per_agent`` is the queue's (``queue.py``); ``max_running_per_agent`` is not a refusal:
extra jobs wait."""

from __future__ import annotations

from gateway.client.jobs.models import JobRequest
from gateway.client.jobs.pools import PoolConfig
from gateway.errors import RuleViolation


def admit(pool: PoolConfig, request: JobRequest) -> tuple[int, int]:
    """Check a request against the rules; return (devices, timeout_s) or raise RuleViolation."""
    devices = request.devices if request.devices is not None else pool.default_device_count()
    rules = pool.rules
    if request.nodes != 1:
        raise RuleViolation(
            "single_node",
            f"pool {pool.name} runs a job on exactly one node (gang allocation); you asked for "
            f"{request.nodes} nodes",
        )
    allowed = rules.allowed_device_counts
    if allowed is not None and devices not in allowed:
        what = "exactly " + str(allowed[0]) if len(allowed) == 1 else "one of " + str(sorted(allowed))
        raise RuleViolation(
            "allowed_device_counts",
            f"pool {pool.name} takes {what} {pool.unit()} per job on one node; you asked for {devices}",
        )
    if devices > pool.node_capacity or devices < 0:
        raise RuleViolation(
            "node_capacity",
            f"pool {pool.name}'s largest node has {pool.node_capacity} {pool.unit()}; "
            f"you asked for {devices}",
        )
    timeout = request.timeout_s or min(pool.timeout_s, rules.max_timeout_s)
    if timeout > rules.max_timeout_s:
        raise RuleViolation(
            "max_timeout_s",
            f"pool {pool.name} allows at most {rules.max_timeout_s} s; you asked for {timeout}",
        )
    if request.kind not in rules.kinds:
        raise RuleViolation(
            "kinds", f"pool {pool.name} accepts {', '.join(rules.kinds)} jobs, not {request.kind}"
        )
    return devices, timeout
