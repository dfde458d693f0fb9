"""The monitor's pydantic models: Attention items, timeline entries, series, claim windows, costs, actions."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Severity = Literal["critical", "warning", "info"]
TimelineKind = Literal[
    "start", "wake", "model", "tool_call", "tool_result", "compaction", "error", "stop", "note"
]
MAX_ENTRY_DATA = 16_384  # bytes of one entry's ``data`` as JSON
MAX_SUMMARY = 500


class AttentionAction(BaseModel):
    """A button next to an Attention item: POST ``url`` (under /ui/api or /ui/agents) with ``body``."""

    label: str
    url: str
    body: dict[str, Any] = Field(default_factory=dict)
    confirm: str = ""


class AttentionItem(BaseModel):
    """One thing that needs a human."""

    key: str = Field(description="Stable id of the item (kind:subject), e.g. agent-stalled:dev-3.")
    kind: str = Field(description="agent, pr, job, pool, budget, claim or review.")
    severity: Severity
    title: str = Field(description="One line: what.")
    reason: str = Field(description="Why it needs a human.")
    since: float = Field(description="Unix time it started (newest first).")
    link: str = Field("", description="Where to look (a UI path).")
    subject: str = Field("", description="The agent, PR (org/repo#n), job id, pool or task concerned.")
    actions: list[AttentionAction] = Field(default_factory=list)
    dismissable: bool = Field(False, description="An operator may acknowledge it away.")


class AttentionReport(BaseModel):
    items: list[AttentionItem] = Field(default_factory=list, description="Newest first.")
    computed_at: float
    sources: dict[str, str] = Field(
        default_factory=dict, description="Each source's state: ok, or why it is not available."
    )


class TimelineIn(BaseModel):
    """One entry an agent reports about itself (``POST /api/timeline``); who it is comes from the token."""

    model_config = ConfigDict(extra="forbid")

    kind: TimelineKind
    ts: float = Field(description="Unix time on the agent's clock.")
    summary: str = Field("", max_length=MAX_SUMMARY, description="One line for people.")
    data: dict[str, Any] = Field(default_factory=dict, description="Details (bounded: 16 KiB as JSON).")
    call_id: str = Field("", max_length=100, description="Pairs a tool_call with its tool_result.")

    @field_validator("data")
    @classmethod
    def _bounded(cls, value: dict[str, Any]) -> dict[str, Any]:
        size = len(json.dumps(value, default=str))
        if size > MAX_ENTRY_DATA:
            raise ValueError(f"data is {size} bytes as JSON; the limit is {MAX_ENTRY_DATA}")
        return value


class TimelinePost(BaseModel):
    model_config = ConfigDict(extra="forbid")

    entries: list[TimelineIn] = Field(max_length=200, description="Oldest first.")


class ModelRate(BaseModel):
    """The price table's rate for one model, as a cost answer shows the one it used."""

    input_per_mtok: float = Field(description="USD per million uncached input tokens.")
    output_per_mtok: float = Field(description="USD per million output tokens.")


class TimelineEntry(TimelineIn):
    """A stored entry: the agent's report plus what the gateway knows."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(description="Stream entry id (sortable).")
    agent: str = Field(description="The principal that reported it (from its token).")
    received: float = Field(description="Unix time the gateway stored it.")
    cost_usd: float | None = Field(None, description="Model calls: estimated from the proxy's price table.")
    cost_estimate: bool = Field(
        False, description="The model is scripted or not in the price table: cost_usd is at the rate below."
    )
    rate: ModelRate | None = Field(None, description="With cost_estimate: the price table's rate it used.")


class TimelinePage(BaseModel):
    agent: str
    entries: list[TimelineEntry] = Field(description="Newest first.")
    more: bool = Field(description="Older entries remain (page with before=<last id>).")
    doing: str = Field("", description="The current tool call, or the last one with its age.")


class Doing(BaseModel):
    text: str
    tool: str | None = None
    running: bool = False
    since: float | None = None


class SeriesPoint(BaseModel):
    ts: float
    value: float


class Series(BaseModel):
    name: str
    step_s: float
    gauge: bool
    points: list[SeriesPoint]


class ClaimWindow(BaseModel):
    task: str
    agent: str
    since: float
    until: float | None = Field(None, description="None: still held.")
    how: str = Field("", description="done, released, lapsed, taken (by another agent), or '' (held).")
    expires_at: float | None = None


class CostLine(BaseModel):
    task: str = Field(description="Task id; '-' for usage while holding no task.")
    agent: str
    model: str | None = None
    tokens: int
    cost_usd: float
    estimate: bool = Field(False, description="The model is scripted, unknown or not in the price table.")


class CostReport(BaseModel):
    lines: list[CostLine]
    by_task: dict[str, dict[str, float]]
    by_agent: dict[str, dict[str, float]]
    by_model: dict[str, dict[str, float]]
    swarm: dict[str, float]
    note: str = ""
    estimate: bool = Field(False, description="Some line's cost is an estimate (see prices).")
    prices: dict[str, ModelRate] = Field(
        default_factory=dict, description="The rates the estimated lines used, by their model."
    )


class CostPoint(BaseModel):
    ts: float
    tokens: float
    cost_usd: float
    model: str | None = Field(
        None, description="The model the LLM proxy booked most of the agent's tokens under."
    )
    estimate: bool = False
    prices: dict[str, ModelRate] = Field(default_factory=dict)


class ActionRecord(BaseModel):
    """One operator action, as audited in ``ks:mon:actions``."""

    id: str = ""
    ts: float
    operator: str
    action: str
    target: str
    detail: str = ""
    outcome: Literal["done", "refused", "failed"] = "done"
    message: str = ""


class ActionResult(BaseModel):
    ok: bool
    message: str
    data: dict[str, Any] = Field(default_factory=dict)


ReviewEvent = Literal["approve", "request_changes", "comment"]


class ReviewBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event: ReviewEvent
    body: str = Field("", max_length=20_000)
    head_sha: str = Field(
        "", max_length=64, description="Pin the review to the head you read (409 if moved)."
    )


class CommentBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    body: str = Field(min_length=1, max_length=20_000)


class ReassignBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str = Field(pattern=r"^[a-z][a-z0-9-]{0,38}$", description="Who should take the task.")
    note: str = Field("", max_length=2000)
