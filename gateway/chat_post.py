"""One chat post's decisions, apart from its reads and its write: is the text acceptable, who gets it in
their inbox and why, and the fields stored under its id. ``ChatService.post`` runs them in order:
check the text, read what the checks need (one pipeline), resolve the recipients, write (one script).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from gateway.errors import ChatError
from gateway.models import Channel


@dataclass
class PostContext:
    """What one pipelined read found for a post: its channel, the thread it joins and who wrote the
    message it answers, and the channel's members when it mentions ``@all``."""

    meta: Channel
    cached: bool = False  # the channel came from the replica's cache: the post script checks it exists
    thread: str = ""
    parent_sender: str | None = None
    members: set[str] = field(default_factory=set)


def check_text(text: str, max_bytes: int) -> None:
    size = len(text.encode())
    if size > max_bytes:
        raise ChatError(f"message is {size} bytes; the limit is {max_bytes}", status=413)
    if not text.strip():
        raise ChatError("empty message")


def recipients(
    sender: str, peers: tuple[str, str] | None, named: list[str], context: PostContext, kind: str
) -> dict[str, str]:
    """Each recipient's inbox reason: ``mention`` (by name or ``@all``), ``reply`` (to their message),
    ``dm`` (the DM's other member) -- a notice's recipients all get ``notice``; never the sender."""
    reasons = dict.fromkeys(context.members, "mention")
    reasons.update(dict.fromkeys(named, "mention"))
    if context.parent_sender:
        reasons.setdefault(context.parent_sender, "reply")
    if peers:
        reasons.update(dict.fromkeys(peers, "dm"))
    reasons.pop(sender, None)
    if kind == "notice":
        reasons = dict.fromkeys(reasons, "notice")
    return reasons


def message_fields(
    channel: str,
    sender: str,
    text: str,
    reply_to: str | None,
    context: PostContext,
    mentions: list[str],
    kind: str,
) -> dict[str, str]:
    """The fields stored with the message in its channel, each inbox and the event stream."""
    return {
        "channel": channel,
        "sender": sender,
        "text": text,
        "ts": repr(time.time()),
        "reply_to": reply_to or "",
        "thread": context.thread,
        "mentions": ",".join(sorted(set(mentions))),
        "kind": kind,
    }
