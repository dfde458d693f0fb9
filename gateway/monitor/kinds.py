"""What kind of activity an event is, for filters and charts: chat, pr, job, gate or ops.

| kind | events |
|---|---|
| ``job`` | job state changes (``type: job``) and the job notices workers DM to submitters |
| ``gate`` | the review gate's announcements (sender ``gate``) |
| ``pr`` | anything else in ``#reviews`` (review requests, discussions of PRs) |
| ``ops`` | ``#ops`` and the other system senders' notices (budgets, the task board) |
| ``chat`` | every other message: channels and DMs between agents and operators |
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.principals import PrincipalKind

KINDS = ("chat", "pr", "job", "gate", "ops")
GATE_SENDER = "gate"


def event_kind(fields: Mapping[str, str], sender_kind: PrincipalKind | None) -> str:
    """The kind of one ``ks:events`` entry; ``sender_kind``: the kind of a message's sender, if known."""
    if fields.get("type", "message") == "job":
        return "job"
    if fields.get("type", "message") != "message":
        return "ops"
    channel = fields.get("channel", "")
    sender = fields.get("sender", "")
    if sender_kind == PrincipalKind.worker:
        return "job"
    if sender == GATE_SENDER and sender_kind in (PrincipalKind.gate, None):
        return "gate"
    if channel == "ops" or sender_kind == PrincipalKind.gate:
        return "ops"
    if channel == "reviews":
        return "pr"
    return "chat"


def event_agent(fields: Mapping[str, str]) -> str:
    """Whose activity it is: a message's sender, a job's submitter."""
    return fields.get("sender") or fields.get("agent") or ""
