"""The activity feed (*All activity*) with its filters: by agent, by kind (chat, pr, job, gate, ops).

A feed item is a message the operator may read or a job's state change, each with its kind
(``gateway.monitor.kinds``). The feed is read newest first from ``ks:events`` and bounded: a request scans
at most ``MAX_SCAN`` events, so a filter that matches nothing answers quickly (with ``more`` set when the
scan stopped before the stream's start).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway import keys
from gateway.chat import message_from_fields
from gateway.context import GatewayContext
from gateway.models import FIRST_ID, Message
from gateway.monitor.kinds import KINDS, event_agent, event_kind
from gateway.principals import Principal, PrincipalKind

PAGE = 50
MAX_SCAN = 20_000
CHUNK = 500


@dataclass(frozen=True)
class FeedFilter:
    agent: str | None = None
    kind: str | None = None

    @classmethod
    def of(cls, agent: str | None, kind: str | None) -> FeedFilter:
        return cls(agent or None, kind if kind in KINDS else None)

    @property
    def active(self) -> bool:
        return bool(self.agent or self.kind)

    def matches(self, fields: dict[str, str], kind: str) -> bool:
        if self.kind and kind != self.kind:
            return False
        return not (self.agent and event_agent(fields) != self.agent)


@dataclass
class FeedItem:
    event: str
    kind: str
    message: Message | None = None
    job: dict[str, Any] | None = None


@dataclass
class SenderKinds:
    """Principal kinds by name, looked up once per request."""

    ctx: GatewayContext
    known: dict[str, PrincipalKind | None] = field(default_factory=dict)

    async def of(self, name: str) -> PrincipalKind | None:
        if name not in self.known:
            principal = await self.ctx.principals.get(name) if name else None
            self.known[name] = principal.kind if principal else None
        return self.known[name]


async def classify(ctx: GatewayContext, fields: dict[str, str], kinds: SenderKinds | None = None) -> str:
    kinds = kinds or SenderKinds(ctx)
    return event_kind(fields, await kinds.of(fields.get("sender", "")))


async def feed(
    ctx: GatewayContext,
    principal: Principal,
    before: str | None = None,
    only: FeedFilter | None = None,
    with_jobs: bool = True,
) -> tuple[list[FeedItem], bool]:
    """(items oldest first, whether older ones may remain) of what ``principal`` may read."""
    only = only or FeedFilter()
    if before == FIRST_ID:
        return [], False  # nothing is older (and Redis refuses an exclusive bound there)
    found: list[FeedItem] = []
    kinds = SenderKinds(ctx)
    upper = f"({before}" if before else "+"
    scanned = 0
    more = False
    while len(found) < PAGE:
        batch = await ctx.redis.xrevrange(keys.EVENTS, upper, "-", CHUNK)
        for event_id, fields in batch:
            kind_of = fields.get("type", "message")
            if kind_of == "message" and "id" in fields and ctx.chat.visible_event(principal, fields):
                kind = event_kind(fields, await kinds.of(fields.get("sender", "")))
                if only.matches(fields, kind):
                    found.append(FeedItem(event_id, kind, message=message_from_fields(fields["id"], fields)))
            elif kind_of == "job" and with_jobs and only.matches(fields, "job"):
                found.append(FeedItem(event_id, "job", job=dict(fields)))
        scanned += len(batch)
        if len(batch) < CHUNK:
            break
        upper = f"({batch[-1][0]}"
        if scanned >= MAX_SCAN:
            more = True
            break
    more = more or len(found) >= PAGE
    return list(reversed(found[:PAGE])), more
