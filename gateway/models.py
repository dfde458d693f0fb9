"""Wire models shared by the REST API, MCP tools and the event stream."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class Message(BaseModel):
    """One chat message, as stored in its channel's stream."""

    id: str = Field(description="Redis stream id; sortable, unique within the channel.")
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

    id: str = Field(description="Inbox stream id (the cursor advances past it).")
    reason: str = Field(description="dm, mention, reply or notice.")
    channel: str = Field(description="Channel the message is in.")
    message_id: str = Field(description="Id of the message in its channel.")
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
    reply_to: str | None = Field(None, description="Message id to reply to (starts or extends a thread).")


class ChannelCreate(BaseModel):
    name: str = Field(description="New channel name: a-z, 0-9, '-' and '_'.")
    topic: str = Field("", description="Initial topic.")


class TopicUpdate(BaseModel):
    topic: str = Field(description="New topic.")


class PrincipalCreate(BaseModel):
    name: str = Field(description="Unique name (a-z, 0-9, '-').")
    kind: Literal["agent", "operator", "worker", "gate"] = Field("agent", description="Principal kind.")
    email: str | None = Field(None, description="Git e-mail; default <name>@<kind>s.<swarm>.")


class Heartbeat(BaseModel):
    state: str = Field("idle", description="What the agent says it is: idle, working, ...")
    doing: str = Field("", description="One line on what it is doing now.")
