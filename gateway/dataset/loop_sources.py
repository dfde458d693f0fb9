"""Where the build learns what the red team and the heal did (issue 27): the withdrawals (``GET
/api/dataset/withdrawals?repo=``), the counterexamples (``GET /api/counterexamples?repo=``) and the
authors' timelines (``GET /api/agents/{name}/timeline``, the monitor's). Each is a ``Protocol`` with a
gateway implementation and an in-memory one (tests, offline rebuilds)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.client import GatewayClient, Missing
from gateway.dataset.withdrawals import Withdrawal

# Timeline kinds an excerpt holds: the wakes and the model and tool calls. Tool *results* stay out: they
# hold what tools returned (other agents' messages, files), not what the author did.
EXCERPT_KINDS = ("wake", "model", "tool_call")
TIMELINE_PAGE = 500  # the most /api/agents/{name}/timeline returns at once
TIMELINE_SLACK_S = 60.0  # agents post their entries in batches: read this far past a window's start


class CounterexampleRecord(BaseModel):
    """The fields of a ``Counterexample`` (gateway/counterexamples/models.py) the dataset uses, read
    like ``JobRecord`` reads a job (``extra="ignore"``): the counterexamples plugin writes withdrawals
    (this package's ``WithdrawalStore``), so this package never imports it back."""

    model_config = ConfigDict(extra="ignore")

    id: str
    finder: str
    task: str
    repo: str
    kernel: str
    sha: str
    status: str = Field("pending", description="pending, confirmed, refused or error.")
    reasons: list[str] = Field(default_factory=list)
    job: str | None = Field(None, description="The confirming job.")
    regression_pr: int | None = None
    withdrew: list[str] = Field(default_factory=list)
    created_at: float = 0.0


class WithdrawalSource(Protocol):
    """The kernels withdrawn from a repo's accepted split."""

    def withdrawals(self, repo: str) -> list[Withdrawal]: ...


class CounterexampleSource(Protocol):
    """The counterexamples submitted against a repo's kernels; None: this gateway takes none."""

    def counterexamples(self, repo: str) -> list[CounterexampleRecord] | None: ...


class TimelineSource(Protocol):
    """An agent's timeline entries (``EXCERPT_KINDS``) with ``since < ts <= until``, oldest first, as
    dicts of ``kind``, ``ts``, ``summary``, ``data``; None: no monitor keeps timelines."""

    def entries(self, agent: str, since: float, until: float) -> list[dict[str, Any]] | None: ...


class GatewayWithdrawalSource:
    """``GET /api/dataset/withdrawals?repo=``; a gateway from before withdrawals (404) has none."""

    def __init__(self, gateway: GatewayClient) -> None:
        self.gateway = gateway

    def withdrawals(self, repo: str) -> list[Withdrawal]:
        try:
            listed = self.gateway.get("/api/dataset/withdrawals", repo=repo)
        except Missing:
            return []
        return [Withdrawal.model_validate(w) for w in listed]


class GatewayCounterexampleSource:
    """``GET /api/counterexamples?repo=`` (a JSON list of ``Counterexample`` records); 404: no such
    route here, so the card says the counts are unknown rather than zero. A record this build cannot
    read (a newer gateway's shape) is skipped, never fatal."""

    def __init__(self, gateway: GatewayClient) -> None:
        self.gateway = gateway

    def counterexamples(self, repo: str) -> list[CounterexampleRecord] | None:
        try:
            listed = self.gateway.get("/api/counterexamples", repo=repo)
        except Missing:
            return None
        out = []
        for raw in listed if isinstance(listed, list) else []:
            try:
                out.append(CounterexampleRecord.model_validate(raw))
            except ValidationError:
                continue
        return [c for c in out if c.repo == repo]


class GatewayTimelineSource:
    """The monitor's timelines, read as the build's operator; pages are fetched newest first, once per
    agent, only as far back as the oldest window asked for (404: no monitor, no timelines)."""

    def __init__(self, gateway: GatewayClient) -> None:
        self.gateway = gateway
        self.available = True
        self.fetched: dict[str, list[dict[str, Any]]] = {}  # newest first
        self.exhausted: set[str] = set()

    def _fetch_until(self, agent: str, since: float) -> None:
        got = self.fetched.setdefault(agent, [])
        while agent not in self.exhausted and (not got or got[-1]["ts"] > since - TIMELINE_SLACK_S):
            before = got[-1]["id"] if got else None
            page = self.gateway.get(
                f"/api/agents/{agent}/timeline",
                limit=TIMELINE_PAGE,
                kind=",".join(EXCERPT_KINDS),
                before=before,
            )
            entries = [e for e in page.get("entries") or [] if isinstance(e, dict)]
            got.extend(entries)
            if not page.get("more") or not entries:
                self.exhausted.add(agent)

    def entries(self, agent: str, since: float, until: float) -> list[dict[str, Any]] | None:
        if not self.available:
            return None
        try:
            self._fetch_until(agent, since)
        except Missing:
            self.available = False
            return None
        return in_window(reversed(self.fetched.get(agent, [])), since, until)


def in_window(entries: Iterable[dict[str, Any]], since: float, until: float) -> list[dict[str, Any]]:
    """The excerpt's entries of ``entries`` (oldest first): its kinds, ``since < ts <= until``."""
    return [
        {k: e.get(k) for k in ("kind", "ts", "summary", "data")}
        for e in entries
        if e.get("kind") in EXCERPT_KINDS
        and isinstance(e.get("ts"), int | float)
        and since < e["ts"] <= until
    ]


class StaticWithdrawalSource:
    def __init__(self, withdrawals: Iterable[Withdrawal] = ()) -> None:
        self.items = list(withdrawals)

    def withdrawals(self, repo: str) -> list[Withdrawal]:
        return [w for w in self.items if w.repo == repo]


class StaticCounterexampleSource:
    def __init__(self, counterexamples: Iterable[CounterexampleRecord] | None = ()) -> None:
        self.items = None if counterexamples is None else list(counterexamples)

    def counterexamples(self, repo: str) -> list[CounterexampleRecord] | None:
        return None if self.items is None else [c for c in self.items if c.repo == repo]


class StaticTimelineSource:
    """Timelines given as agent -> entries (any order; each a dict with ``kind``, ``ts``, ...)."""

    def __init__(self, timelines: dict[str, list[dict[str, Any]]]) -> None:
        self.timelines = timelines

    def entries(self, agent: str, since: float, until: float) -> list[dict[str, Any]] | None:
        found = sorted(self.timelines.get(agent, []), key=lambda e: float(e.get("ts") or 0.0))
        return in_window(found, since, until)
