"""The LLM proxy's usage records on the wire: ``/api/usage``, the ``llm_usage`` MCP tool, ``kswarm ps``."""

from __future__ import annotations

from pydantic import BaseModel, Field


class AgentUsage(BaseModel):
    """Accumulated usage and estimated cost of one agent (or of the whole swarm), and its budgets."""

    name: str = Field(description="Agent name, or 'swarm' for the totals.")
    requests: int = Field(0, description="Successful /v1/messages requests recorded.")
    input_tokens: int = Field(0, description="Uncached input tokens.")
    output_tokens: int = Field(0, description="Output tokens.")
    cache_creation_input_tokens: int = Field(0, description="Input tokens written to the prompt cache.")
    cache_read_input_tokens: int = Field(0, description="Input tokens read from the prompt cache.")
    total_tokens: int = Field(0, description="Sum of the four token counters.")
    cost_usd: float = Field(0.0, description="Estimated cost from the configured price table.")
    today_tokens: int = Field(0, description="Tokens of requests started today (UTC).")
    today_cost_usd: float = Field(0.0, description="Estimated cost of requests started today (UTC).")
    reserved_tokens: int = Field(0, description="Tokens reserved by requests in flight (worst case).")
    reserved_usd: float = Field(0.0, description="USD reserved by requests in flight (worst case).")
    leased_tokens: int = Field(
        0, description="Tokens held by gateways' budget leases for this agent's next requests (worst case)."
    )
    leased_usd: float = Field(
        0.0, description="USD held by gateways' budget leases for this agent's next requests (worst case)."
    )
    budget_usd: float | None = Field(None, description="Spending budget; None = unlimited.")
    budget_tokens: int | None = Field(None, description="Token budget; None = unlimited.")
    budget_usd_per_day: float | None = Field(None, description="Spending budget per UTC day.")
    budget_tokens_per_day: int | None = Field(None, description="Token budget per UTC day.")
    exhausted: bool = Field(False, description="True when a budget is used up: requests are refused.")
    hold: str | None = Field(
        None,
        description="Why this agent's model calls are stopped until an operator clears them (an answer "
        "booked more than its request reserved); null: no hold.",
    )
    hold_since: float | None = Field(None, description="Unix time the hold was set.")
    last_request: float | None = Field(None, description="Unix time of the last recorded request.")
    models: dict[str, int] = Field(
        default_factory=dict,
        description="Tokens booked per model the upstream answered with (most first; a name outside "
        "[A-Za-z0-9._:@/-]{1,100} is booked as 'unknown'); never the model the agent asked for.",
    )


class UsageReport(BaseModel):
    agents: dict[str, AgentUsage] = Field(description="Usage per agent (only the caller's own for agents).")
    swarm: AgentUsage | None = Field(None, description="Swarm totals (operators only).")


class BudgetUpdate(BaseModel):
    """An operator's override of one agent's budgets (Redis); a null field falls back to the settings."""

    usd: float | None = Field(None, ge=0, description="USD budget, all time.")
    tokens: int | None = Field(None, ge=0, description="Token budget, all time.")
    usd_per_day: float | None = Field(None, ge=0, description="USD budget per UTC day.")
    tokens_per_day: int | None = Field(None, ge=0, description="Token budget per UTC day.")
