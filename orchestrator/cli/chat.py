"""``kswarm chat send|tail``: the group chat from a terminal, as the token's owner.

A message's id is the gateway's stream id, ``<ms>-<seq>`` (``1796530780192-0``): unique, but no one
reads or types it. ``chat tail`` shows each message's *short id* instead, the last ``SHORT_DIGITS``
digits of its millisecond (``780192``; ``780192.1`` for the second message of one millisecond), and a
reply as ``↳780192`` (the short id of the message it answers). ``chat send --reply-to`` takes either
form: a short id is looked up among the target's recent messages (``--json`` keeps the full ids).
"""

from __future__ import annotations

import datetime
import json
import re
from typing import Annotated, Any

import typer

from gateway.client import BadInput, GatewayClient, Missing
from orchestrator.cli.commands import HomeOpt, JsonOpt, command, connect
from orchestrator.cli.output import colour_of, console, print_json, safe

SHORT_DIGITS = 6  # a short id repeats after 10**6 ms (17 min); --reply-to looks among recent messages
FULL_ID = re.compile(r"^\d+-\d+$")
SHORT_ID = re.compile(rf"^\d{{1,{SHORT_DIGITS}}}(\.\d+)?$")
LOOKUP_LIMIT = 500  # the gateway's largest history page (gateway.config: history_max_limit)


def short_id(message_id: str) -> str:
    """``1796530780192-0`` as ``780192``, ``1796530780192-1`` as ``780192.1``; anything else as it is."""
    if not FULL_ID.match(message_id):
        return message_id
    ms, _, seq = message_id.partition("-")
    short = ms[-SHORT_DIGITS:]
    return short if seq == "0" else f"{short}.{seq}"


def format_message(msg: dict[str, Any]) -> str:
    stamp = datetime.datetime.fromtimestamp(float(msg["ts"])).strftime("%H:%M:%S")
    thread = f" ↳{safe(short_id(msg['reply_to']))}" if msg.get("reply_to") else ""
    sender = msg["sender"]
    return (
        f"[dim]{stamp} #{safe(msg['channel'])} {safe(short_id(msg['id']))}{thread}[/dim] "
        f"[bold {colour_of(sender)}]{safe(sender)}[/]: {safe(msg['text'])}"
    )


def channel_of(gateway: GatewayClient, target: str) -> str:
    """The channel ``chat send TARGET`` posts in: ``#name`` or ``name``, or ``@peer``'s DM channel."""
    if not target.startswith("@"):
        return target.lstrip("#")
    peer = target[1:]
    for channel in gateway.get("/api/channels"):
        name = str(channel["name"])
        if name.startswith("dm:") and peer in name.split(":")[1:]:
            return name
    raise Missing(0, f"no message with @{peer} yet to reply to")


def full_id(gateway: GatewayClient, target: str, given: str) -> str:
    """``--reply-to`` as the gateway's id: a full id as it is, a short id looked up among the target's
    recent messages (it must name exactly one)."""
    if FULL_ID.match(given):
        return given
    if not SHORT_ID.match(given):
        raise BadInput(0, f"--reply-to {given!r} is not a message id (like 780192, or 1796530780192-0)")
    channel = channel_of(gateway, target)
    recent = gateway.get(f"/api/channels/{channel}/messages", limit=LOOKUP_LIMIT)["messages"]
    found = sorted({m["id"] for m in recent if short_id(m["id"]) == given})
    if not found:
        raise Missing(0, f"no message {given} among the last {LOOKUP_LIMIT} in {channel}")
    if len(found) > 1:
        several = ", ".join(found)
        raise BadInput(0, f"{given} names several messages in {channel} ({several}): give the full id")
    return found[0]


def show(msg: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(msg), flush=True)  # JSON Lines: one message per line
    else:
        console.print(format_message(msg), highlight=False)
        console.file.flush()  # a pipe (| grep, a test) sees each message as it arrives


app = typer.Typer(help="The group chat: send and tail.", no_args_is_help=True)


@command(app, "send")
def send(
    target: Annotated[str, typer.Argument(help="Channel name, or @name for a DM.")],
    text: Annotated[str, typer.Argument(help="Message text; @name mentions notify.")],
    reply_to: Annotated[
        str | None,
        typer.Option(
            "--reply-to", help="Message to reply to: its id as chat tail shows it (780192), or in full."
        ),
    ] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Post as the token's owner (KSWARM_TOKEN, else the operator)."""
    path = f"/api/dms/{target[1:]}/messages" if target.startswith("@") else None
    with connect(home) as gateway:
        body = {"text": text, "reply_to": full_id(gateway, target, reply_to) if reply_to else None}
        msg = gateway.request("POST", path or f"/api/channels/{target.lstrip('#')}/messages", json=body)
    if as_json:
        print_json(msg)
        return
    console.print(f"sent {safe(short_id(msg['id']))} to {safe(msg['channel'])}", highlight=False)


@command(app, "tail")
def tail(
    channel: Annotated[
        str | None, typer.Argument(help="Channel (default: every channel and DM you can see).")
    ] = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing new messages.")] = False,
    lines: Annotated[int, typer.Option("-n", help="How many recent messages to print first.")] = 20,
    home: HomeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per message.")] = False,
) -> None:
    """Print recent messages, and with -f follow live (SSE, resumes after drops)."""
    with connect(home) as gateway:
        name = channel.lstrip("#") if channel else None
        channels = [name] if name else [c["name"] for c in gateway.get("/api/channels")]
        recent: list[dict[str, Any]] = []
        for each in channels if lines > 0 else []:
            recent += gateway.get(f"/api/channels/{each}/messages", limit=lines)["messages"]
        for msg in sorted(recent, key=lambda m: m["ts"])[-lines:] if lines > 0 else []:
            show(msg, as_json)
        console.file.flush()
        if not follow:
            return
        try:
            for _, data in gateway.follow_events({"channel": name} if name else {}):
                if data.get("type") == "message":
                    show(data, as_json)
        except KeyboardInterrupt:
            return
