"""The overview's pydantic models: the figures that answer "what is my swarm doing?".

Every figure carries the UI list it counts (``link``), so the landing page and ``GET
/api/monitor/overview`` say the same thing and an operator can open what a number stands for.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from gateway.monitor.models import AttentionReport


class Figure(BaseModel):
    """One number on the overview and the list it counts."""

    value: float = Field(description="The count (or USD, for spending).")
    link: str = Field(description="The UI list it counts (a /ui path, with a filter where the list has one).")


class TaskFigures(BaseModel):
    open: Figure
    claimed: Figure
    done: Figure


class PrFigures(BaseModel):
    open: Figure = Field(description="Open PRs (waiting + blocked).")
    waiting: Figure = Field(description="Open, waiting for a review or a check (no rule blocks them).")
    blocked: Figure = Field(description="Open, and the gate's last decision named a blocking reason.")
    merged_last_hour: Figure = Field(description="Merged by the gate in the last hour.")
    merged: Figure = Field(description="Merged, all time.")


class PoolFigures(BaseModel):
    pool: str
    queued: Figure
    running: Figure
    failed_last_hour: Figure = Field(
        description="Jobs of the pool that ended failed, error or timeout in the last hour."
    )


class AgentFigures(BaseModel):
    """Each enabled agent counts once: working or idle (together: up), stalled, or down."""

    up: Figure = Field(description="Beating within the stall threshold (working + idle).")
    working: Figure = Field(description="Up, and its heartbeat says something else than idle.")
    idle: Figure = Field(description="Up, and its heartbeat says idle.")
    stalled: Figure = Field(description="Running, but its last heartbeat is older than the threshold.")
    down: Figure = Field(
        description="Not running: crash-looping, backing off, failed, quarantined or never beat."
    )


class SpendFigures(BaseModel):
    """What the LLM proxy booked for the whole swarm, beside the swarm's budgets (None: unlimited)."""

    today_usd: Figure
    last_hour_usd: Figure = Field(description="The increase the monitor sampled over the last hour.")
    total_usd: Figure
    today_tokens: int
    budget_usd_per_day: float | None = None
    budget_usd: float | None = None
    budget_tokens_per_day: int | None = None
    per_hour_of_daily_budget: float | None = Field(
        None, description="The last hour's spend as a share of an hour's part of the daily USD budget."
    )


class ThroughputFigures(BaseModel):
    """Kernels accepted: PRs the gate merged."""

    accepted_last_hour: Figure = Field(description="Kernels accepted in the last hour (per hour).")
    accepted: Figure = Field(description="All time.")
    per_hour_since_start: float | None = Field(
        None, description="Accepted per hour on average since the monitor started watching."
    )


class Overview(BaseModel):
    computed_at: float
    started_at: float | None = Field(None, description="When the monitor started watching this swarm.")
    attention: AttentionReport
    tasks: TaskFigures | None = None
    prs: PrFigures | None = None
    pools: list[PoolFigures] = Field(default_factory=list)
    agents: AgentFigures
    spend: SpendFigures | None = None
    throughput: ThroughputFigures | None = None
    sources: dict[str, str] = Field(
        default_factory=dict, description="Each part's state: ok, or why it is missing (None above)."
    )
