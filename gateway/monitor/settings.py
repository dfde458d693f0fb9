"""Monitoring settings (environment prefix ``KSWARM_MONITOR_``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from gateway.monitor.alert_targets import AlertTargets
from gateway.swarm.liveness import DEFAULT_STALL_AFTER_S


class MonitorSettings(BaseSettings):
    """Thresholds of the Attention list, the feeder's pace, the retention of history, and where
    Attention items are pushed (``alerts``; the swarm spec's ``alerts:`` section is this same list)."""

    # An error never quotes its input: an alert target's URL is a secret (gateway.monitor.alerts).
    model_config = SettingsConfigDict(env_prefix="KSWARM_MONITOR_", extra="ignore", hide_input_in_errors=True)

    stall_after_s: float = Field(
        DEFAULT_STALL_AFTER_S,
        gt=0,
        description="An agent running without a heartbeat for longer than this is stalled, in every view "
        "(gateway/swarm/liveness.py).",
    )
    pr_blocked_after_s: float = Field(
        600.0, ge=0, description="An open PR the gate has not merged for this long is on Attention."
    )
    budget_warn_ratio: float = Field(
        0.8, gt=0, le=1, description="An agent past this share of any of its budgets is on Attention."
    )
    recent_window_s: float = Field(
        3600.0, gt=0, description="How far back failed jobs, lapsed claims and flagged speedups are listed."
    )
    attention_every_s: float = Field(
        2.0, gt=0, description="How often the feeder recomputes Attention and announces a change (SSE)."
    )
    sample_s: float = Field(
        10.0, gt=0, description="How often usage, queue depths, claims and gate decisions are sampled."
    )
    retention_days: int = Field(7, ge=1, le=90, description="Days of per-minute history kept in Redis.")
    timeline_maxlen: int = Field(
        10_000, ge=100, description="Entries kept per agent timeline (an approximate cap)."
    )
    actions_maxlen: int = Field(10_000, ge=100, description="Operator actions kept in the audit stream.")
    lease_s: float = Field(
        15.0, gt=1, description="The feeder's lease: another replica takes over this long after it stops."
    )
    audit_channel: str = Field("ops", description="Channel where job and task actions are announced.")
    review_channel: str = Field("reviews", description="Channel where PR actions are announced.")
    alerts: AlertTargets = Field(
        default_factory=list,
        description="Receivers of Attention items as they appear (webhook, Slack): operator config only.",
    )
