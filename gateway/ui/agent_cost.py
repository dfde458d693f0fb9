"""What an agent cost, per task and per wake, for its page.

Two sources, each shown for what it is:

- booked: the monitor's ledger (``GET /api/monitor/cost``), the LLM proxy's own count of the agent's calls,
  each booked to the tasks the agent held a claim on at that moment;
- reported: the model calls of the agent's timeline (``GET /api/agents/<name>/timeline``) priced by the
  gateway when they arrived. A model the agent reaches without the proxy (the demo's ``scripted`` policy,
  a key of its own) is counted only here. Per wake: the calls after each ``wake`` entry up to the next;
  per task: the claim window (``GET /api/monitor/claims``) that was open when the call arrived.

A cost of a model without a price of its own (``scripted``, unknown) is an estimate at the table's
``default`` rate: flagged, with the rates used (``{model: {input_per_mtok, output_per_mtok}}``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.ui.internal import InternalApi, has_route

TIMELINE_ROUTE = "/api/agents/{name}/timeline"
USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
UNATTRIBUTED = "-"
TIMELINE_LIMIT = 500
WAKES_SHOWN = 10


@dataclass
class Spend:
    """Model calls, their tokens and USD, and whether any of that USD is an estimate."""

    calls: int = 0
    tokens: int = 0
    cost: float = 0.0
    estimate: bool = False

    def add(self, entry: dict[str, Any]) -> None:
        usage = (entry.get("data") or {}).get("usage") or {}
        self.calls += 1
        if isinstance(usage, dict):
            self.tokens += sum(int(usage.get(f) or 0) for f in USAGE_FIELDS if isinstance(usage.get(f), int))
        self.cost += float(entry.get("cost_usd") or 0.0)
        self.estimate = self.estimate or bool(entry.get("cost_estimate"))


@dataclass
class WakeCost:
    ts: float
    summary: str
    spend: Spend = field(default_factory=Spend)


@dataclass
class TaskCost:
    task: str
    booked_tokens: int = 0
    booked_usd: float = 0.0
    booked_estimate: bool = False
    reported: Spend = field(default_factory=Spend)


@dataclass
class AgentCost:
    wakes: list[WakeCost]
    tasks: list[TaskCost]
    rates: dict[str, dict[str, float]]  # the rates estimated costs used, by model
    partial: bool  # the timeline holds more than was read


def model_of(entry: dict[str, Any]) -> str:
    model = (entry.get("data") or {}).get("model")
    return model if isinstance(model, str) and model else "unknown"


def stream_order(entry: dict[str, Any]) -> tuple[int, int]:
    """An entry's place in its stream (its id ``<ms>-<seq>``): the order the agent reported them in, also
    within one report (whose entries share their arrival time)."""
    ms, _, seq = str(entry.get("id") or "0-0").partition("-")
    return (int(ms), int(seq or 0)) if ms.isdigit() and (seq or "0").isdigit() else (0, 0)


def per_wake(entries: list[dict[str, Any]]) -> list[WakeCost]:
    """Newest first: each wake with the model calls that followed it (calls before the first wake read
    go to a wake of ts 0, 'before the wakes read')."""
    wakes: list[WakeCost] = []
    current: WakeCost | None = None
    for entry in sorted(entries, key=stream_order):
        if entry.get("kind") == "wake":
            current = WakeCost(ts=float(entry.get("ts") or 0.0), summary=str(entry.get("summary") or ""))
            wakes.append(current)
        elif entry.get("kind") == "model":
            if current is None:
                current = WakeCost(ts=0.0, summary="before the wakes read")
                wakes.append(current)
            current.spend.add(entry)
    return list(reversed(wakes))


def task_at(claims: list[dict[str, Any]], when: float, now: float) -> str:
    for claim in claims:
        if float(claim["since"]) <= when <= float(claim.get("until") or now):
            return str(claim["task"])
    return UNATTRIBUTED


def per_task(
    entries: list[dict[str, Any]], claims: list[dict[str, Any]], lines: list[dict[str, Any]], now: float
) -> list[TaskCost]:
    rows: dict[str, TaskCost] = {}
    for line in lines:
        row = rows.setdefault(str(line["task"]), TaskCost(str(line["task"])))
        row.booked_tokens += int(line.get("tokens") or 0)
        row.booked_usd += float(line.get("cost_usd") or 0.0)
        row.booked_estimate = row.booked_estimate or bool(line.get("estimate"))
    for entry in entries:
        if entry.get("kind") == "model":
            task = task_at(claims, float(entry.get("received") or 0.0), now)
            rows.setdefault(task, TaskCost(task)).reported.add(entry)
    return sorted(rows.values(), key=lambda r: (r.task == UNATTRIBUTED, r.task))


async def agent_cost(api: InternalApi, name: str, now: float) -> AgentCost | None:
    """``name``'s cost per task and per wake; None without a monitor (no timelines, no ledger)."""
    if not has_route(api.app, TIMELINE_ROUTE):
        return None
    page = await api.get(f"/api/agents/{name}/timeline", kind="wake,model", limit=TIMELINE_LIMIT)
    if not page.ok:
        return None
    entries = [e for e in page.json().get("entries") or [] if isinstance(e, dict)]
    claims_reply = await api.get("/api/monitor/claims", limit=1000)
    claims = [c for c in (claims_reply.json() if claims_reply.ok else []) if c.get("agent") == name]
    ledger = await api.get("/api/monitor/cost")
    report = ledger.json() if ledger.ok else {}
    lines = [x for x in report.get("lines") or [] if x.get("agent") == name]
    rates: dict[str, dict[str, float]] = {}
    for line in lines:
        if line.get("estimate"):
            model = line.get("model") or "unknown"
            rate = (report.get("prices") or {}).get(model)
            if rate:
                rates[model] = rate
    for entry in entries:
        if entry.get("cost_estimate") and isinstance(entry.get("rate"), dict):
            rates[model_of(entry)] = entry["rate"]
    return AgentCost(
        wakes=per_wake(entries)[:WAKES_SHOWN],
        tasks=per_task(entries, claims, lines, now),
        rates=rates,
        partial=bool(page.json().get("more")),
    )
