"""``kswarm chat send|tail``: the group chat from a terminal, as the token's owner."""

from __future__ import annotations

import datetime
import json
from typing import Annotated, Any

import typer

from orchestrator.cli.commands import HomeOpt, JsonOpt, command, connect
from orchestrator.cli.output import colour_of, console, print_json, safe


def format_message(msg: dict[str, Any]) -> str:
    stamp = datetime.datetime.fromtimestamp(float(msg["ts"])).strftime("%H:%M:%S")
    thread = f" ↳{safe(msg['reply_to'])}" if msg.get("reply_to") else ""
    sender = msg["sender"]
    return (
        f"[dim]{stamp} #{safe(msg['channel'])}{thread}[/dim] "
        f"[bold {colour_of(sender)}]{safe(sender)}[/]: {safe(msg['text'])}"
    )


def show(msg: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(msg), flush=True)  # JSON Lines: one message per line
    else:
        console.print(format_message(msg), highlight=False)
        console.file.flush()  # a pipe (| grep, a test) sees each message as it arrives


def register(app: typer.Typer) -> None:
    chat_app = typer.Typer(help="The group chat: send and tail.", no_args_is_help=True)
    app.add_typer(chat_app, name="chat")

    @command(chat_app, "send")
    def send(
        target: Annotated[str, typer.Argument(help="Channel name, or @name for a DM.")],
        text: Annotated[str, typer.Argument(help="Message text; @name mentions notify.")],
        reply_to: Annotated[str | None, typer.Option("--reply-to", help="Message id to reply to.")] = None,
        home: HomeOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Post as the token's owner (KSWARM_TOKEN, else the operator)."""
        body = {"text": text, "reply_to": reply_to}
        path = f"/api/dms/{target[1:]}/messages" if target.startswith("@") else None
        with connect(home) as gateway:
            msg = gateway.request("POST", path or f"/api/channels/{target.lstrip('#')}/messages", json=body)
        if as_json:
            print_json(msg)
            return
        console.print(f"sent {safe(msg['id'])} to {safe(msg['channel'])}")

    @command(chat_app, "tail")
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
