"""Wire models shared by the REST API, MCP tools and the event stream, and the one check of client ids."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from gateway.errors import BadMessageId

# -- message ids ----------------------------------------------------------------------------------
# A message id is a Redis stream id: two unsigned 64-bit integers, ``<ms>-<seq>``. Every id a client
# hands the gateway (REST, SSE, MCP, UI) goes through ``parse_message_id`` before it reaches Redis,
# which would answer anything else -- or an id whose parts overflow -- with an error (a 500).
MAX_ID_PART = 2**64 - 1
FIRST_ID = "0-0"  # below every message (Redis never stores 0-0)
LAST_ID = f"{MAX_ID_PART}-{MAX_ID_PART}"
MESSAGE_ID_PATTERN = r"^[0-9]{1,20}-[0-9]{1,20}$"
_MESSAGE_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")  # [0-9], not \d: no digits of other scripts
# For the OpenAPI document: the form is declared, the check (a 400 naming the parameter) is ours.
MESSAGE_ID_SCHEMA: dict[str, Any] = {"pattern": MESSAGE_ID_PATTERN, "maxLength": 41}


def parse_message_id(value: object, param: str) -> str:
    """``value`` as a canonical message id (``007-01`` -> ``7-1``), or BadMessageId naming ``param``.

    Canonical, because ids are also keys (a thread's index is keyed by its root's id): two spellings
    of one id must not name two threads.
    """
    if isinstance(value, str) and len(value) <= 41 and _MESSAGE_ID.fullmatch(value):
        ms, seq = (int(part) for part in value.split("-"))
        if ms <= MAX_ID_PART and seq <= MAX_ID_PART:
            return f"{ms}-{seq}"
    raise BadMessageId(param)


def optional_message_id(value: object | None, param: str) -> str | None:
    return None if value is None else parse_message_id(value, param)


class Refusal(BaseModel):
    """Every error the gateway answers outside /api/v1 and /v1: a refusal (4xx) or a failure (5xx).

    Request validation (422 from FastAPI) keeps its list form, ``HTTPValidationError``; the OpenAPI
    document declares both (see ``gateway.error_shapes.declare_error_shapes``).
    """

    detail: str = Field(description="Why, in one line (names the parameter when one is at fault).")
    code: str = Field(description="What kind of refusal, a stable name: not_found, rule_violation, ...")


class GiteaError(BaseModel):
    """Gitea's error shape, answered by the embedded forge's Gitea-compatible routes under /api/v1."""

    message: str = Field(description="Why.")
    url: str = Field(description="Gitea's documentation link (empty here).")


class AnthropicErrorBody(BaseModel):
    type: str = Field(description="invalid_request_error, authentication_error, rate_limit_error, ...")
    message: str = Field(description="Why.")


class AnthropicError(BaseModel):
    """Anthropic's error shape, answered by the LLM proxy's Anthropic-compatible routes under /v1
    (the SDKs and the Claude Code CLI turn it into their matching exception)."""

    type: Literal["error"] = Field(description="Always error.")
    error: AnthropicErrorBody


class Message(BaseModel):
    """One chat message, as stored in its channel's stream."""

    id: str = Field(
        description="Stream id <ms>-<seq>: unique across every channel and DM, rising in posting order."
    )
    channel: str = Field(description="Channel name, or dm:<a>:<b> for a direct message.")
    sender: str = Field(description="Principal that posted it (taken from the token).")
    text: str = Field(description="Message text.")
    ts: float = Field(description="Unix time the gateway accepted it.")
    reply_to: str | None = Field(None, description="Id of the message this replies to.")
    thread: str | None = Field(None, description="Id of the thread's root message, for replies.")
    mentions: list[str] = Field(default_factory=list, description="Principals @mentioned (all expanded).")
    kind: Literal["message", "notice"] = Field("message", description="notice = system announcement.")


class InboxItem(BaseModel):
    """Something that needs the recipient's attention."""

    id: str = Field(description="The message's id (its inbox entry has the same id; the cursor passes it).")
    reason: str = Field(description="dm, mention, reply or notice.")
    channel: str = Field(description="Channel the message is in.")
    message_id: str = Field(description="Id of the message (unique across channels).")
    sender: str = Field(description="Who sent it.")
    text: str = Field(description="The message text.")
    ts: float = Field(description="Unix time the message was accepted.")
    thread: str | None = Field(None, description="Thread root id, for replies.")


class Channel(BaseModel):
    name: str = Field(description="Channel name, or dm:<a>:<b>.")
    topic: str = Field("", description="Channel topic.")
    kind: Literal["channel", "dm"] = Field("channel", description="channel (public) or dm (two members).")
    created_by: str = Field("", description="Principal that created it.")
    created: float = Field(0.0, description="Unix time of creation.")
    members: list[str] = Field(default_factory=list, description="Members (filled when listed).")
    unread: int | None = Field(None, description="Messages after the caller's read cursor (capped).")


class PostRequest(BaseModel):
    text: str = Field(description="Message text; @name mentions are parsed by the server.")
    reply_to: Annotated[str, Field(json_schema_extra=MESSAGE_ID_SCHEMA)] | None = Field(
        None, description="Message id to reply to (starts or extends a thread); else a 400 naming reply_to."
    )


class ChannelCreate(BaseModel):
    name: str = Field(description="New channel name: a-z, 0-9, '-' and '_'.")
    topic: str = Field("", max_length=500, description="Initial topic.")


class TopicUpdate(BaseModel):
    topic: str = Field(max_length=500, description="New topic.")


class PrincipalCreate(BaseModel):
    name: str = Field(description="Unique name (a-z, 0-9, '-').")
    kind: Literal["agent", "operator", "worker", "gate"] = Field("agent", description="Principal kind.")
    email: str | None = Field(None, description="Git e-mail; default <name>@<kind>s.<swarm>.")


class Heartbeat(BaseModel):
    state: str = Field("idle", description="What the agent says it is: idle, working, ...")
    doing: str = Field("", description="One line on what it is doing now.")
