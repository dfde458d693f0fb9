"""The ``kswarm`` command line: ``kswarm <noun> <verb>``."""

from __future__ import annotations

import json
import os
import socket
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import httpx
import typer
import uvloop
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from gateway.client.home import ConnectError, Connection, GatewayInfo, connection, ensure_home, kswarm_home

app = typer.Typer(
    help="kswarm: a swarm of LLM agents that write, verify and review kernels.", no_args_is_help=True
)
agent_app = typer.Typer(
    help="Agents: add, list, and (with a swarm) restart, memory, quarantine.", no_args_is_help=True
)
chat_app = typer.Typer(help="The group chat: send and tail.", no_args_is_help=True)
app.add_typer(agent_app, name="agent")
app.add_typer(chat_app, name="chat")

console = Console()
err_console = Console(stderr=True)
AGENT_COLOURS = ["cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta"]

HomeOpt = Annotated[Path | None, typer.Option("--home", help="Data dir (default $KSWARM_HOME or ~/.kswarm).")]


def fail(message: str, code: int = 1) -> NoReturn:
    err_console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


def connect(home: Path | None) -> Connection:
    try:
        return connection(home)
    except ConnectError as exc:
        fail(str(exc))


def request(conn: Connection, method: str, path: str, **kwargs: Any) -> Any:
    """One REST call; HTTP errors become a one-line message and exit code 1."""
    try:
        reply = httpx.request(
            method, conn.url + path, headers={"Authorization": f"Bearer {conn.token}"}, timeout=60, **kwargs
        )
    except httpx.TransportError as exc:
        fail(f"cannot reach the gateway at {conn.url}: {exc}")
    if reply.status_code >= 400:
        try:
            detail = reply.json().get("detail", reply.text)
        except ValueError:
            detail = reply.text
        if isinstance(detail, list):  # FastAPI validation errors: name each bad field
            detail = "; ".join(f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}" for d in detail)
        fail(f"{reply.status_code} {detail}")
    return reply.json() if reply.content else None


def colour_of(name: str) -> str:
    return AGENT_COLOURS[zlib.crc32(name.encode()) % len(AGENT_COLOURS)]


# -- up ---------------------------------------------------------------------------------------


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((host, port)) == 0


@app.command()
def up(
    home: HomeOpt = None,
    port: Annotated[int, typer.Option("--port", help="Gateway TCP port on 127.0.0.1.")] = 8765,
    file: Annotated[Path | None, typer.Option("-f", "--file", help="Swarm spec (swarm.yaml) to run.")] = None,
    backend: Annotated[
        str | None, typer.Option("--backend", help="Agent runtime: process or docker (default: the spec's).")
    ] = None,
) -> None:
    """Start Redis (embedded unless REDIS_URL is set) and the gateway in the foreground."""
    from orchestrator.local.launcher import Launcher, LaunchError

    home_dir = ensure_home(kswarm_home(home))
    existing = GatewayInfo.read(home_dir)
    if existing is not None and existing.alive():
        fail(f"kswarm is already up for {home_dir} at {existing.url} (pid {existing.pid})")
    if port_in_use("127.0.0.1", port):
        fail(f"port {port} on 127.0.0.1 is in use; pick another with --port")
    try:
        launcher = Launcher(home_dir, port=port, spec_path=file, backend=backend)
        uvloop.run(
            launcher.run(on_ready=lambda info: print_banner(info, launcher.operator_token, launcher.warnings))
        )
    except LaunchError as exc:
        fail(str(exc))


def print_banner(info: GatewayInfo, token: str, warnings: list[str]) -> None:
    body = (
        f"gateway   [bold]{info.url}[/bold]\n"
        f"socket    {info.socket}\n"
        f"operator  {token}\n"
        f"          (also in {Path(info.socket).parent.parent / 'operator.token'}, mode 600)\n\n"
        "In another terminal:  kswarm agent add alice   ·   kswarm chat tail general -f"
    )
    console.print(Panel(body, title="kswarm is up", subtitle="Ctrl-C stops it", expand=False))
    for warning in warnings:
        err_console.print(f"[yellow]warning:[/yellow] {warning}")


# -- agents -----------------------------------------------------------------------------------


@agent_app.command("add")
def agent_add(
    name: Annotated[str, typer.Argument(help="Agent name (a-z, 0-9, '-').")],
    kind: Annotated[str, typer.Option(help="agent, operator, worker or gate.")] = "agent",
    home: HomeOpt = None,
) -> None:
    """Create a principal and print its token (shown once)."""
    created = request(connect(home), "POST", "/api/principals", json={"name": name, "kind": kind})
    console.print(f"created {created['kind']} [bold]{created['name']}[/bold] <{created['email']}>")
    console.print("token (shown once):")
    print(created["token"])


@agent_app.command("list")
def agent_list(home: HomeOpt = None) -> None:
    """Agents with their last heartbeat."""
    import time

    agents = request(connect(home), "GET", "/api/agents")
    table = Table("agent", "email", "state", "heartbeat", "doing")
    for a in agents:
        beat = "never" if a["last_heartbeat"] is None else f"{time.time() - a['last_heartbeat']:.0f}s ago"
        state = "quarantined" if a["disabled"] else (a["state"] or "-")
        table.add_row(f"[{colour_of(a['name'])}]{a['name']}[/]", a["email"], state, beat, a["doing"] or "")
    console.print(table)


# -- chat -------------------------------------------------------------------------------------


def format_message(msg: dict[str, Any]) -> str:
    import datetime

    stamp = datetime.datetime.fromtimestamp(float(msg["ts"])).strftime("%H:%M:%S")
    where = msg["channel"]
    thread = f" ↳{msg['reply_to']}" if msg.get("reply_to") else ""
    sender = msg["sender"]
    text = msg["text"]
    return f"[dim]{stamp} #{where}{thread}[/dim] [bold {colour_of(sender)}]{sender}[/]: {text}"


@chat_app.command("send")
def chat_send(
    target: Annotated[str, typer.Argument(help="Channel name, or @name for a DM.")],
    text: Annotated[str, typer.Argument(help="Message text; @name mentions notify.")],
    reply_to: Annotated[str | None, typer.Option("--reply-to", help="Message id to reply to.")] = None,
    home: HomeOpt = None,
) -> None:
    """Post as the token's owner (KSWARM_TOKEN, else the operator)."""
    conn = connect(home)
    body = {"text": text, "reply_to": reply_to}
    if target.startswith("@"):
        msg = request(conn, "POST", f"/api/dms/{target[1:]}/messages", json=body)
    else:
        msg = request(conn, "POST", f"/api/channels/{target.lstrip('#')}/messages", json=body)
    console.print(f"sent {msg['id']} to {msg['channel']}")


def sse_events(conn: Connection, params: dict[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event id, data) from /api/events, reconnecting with Last-Event-ID after a drop."""
    last_id: str | None = None
    while True:
        headers = {"Authorization": f"Bearer {conn.token}"}
        if last_id:
            headers["Last-Event-ID"] = last_id
        try:
            with httpx.stream(
                "GET",
                conn.url + "/api/events",
                params=params,
                headers=headers,
                timeout=httpx.Timeout(60, read=None),
            ) as reply:
                if reply.status_code >= 400:
                    fail(f"{reply.status_code} {reply.read().decode()}")
                event_id, data = None, []
                for line in reply.iter_lines():
                    if line.startswith("id:"):
                        event_id = line[3:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].strip())
                    elif line == "" and data:
                        if event_id:
                            last_id = event_id
                        yield event_id or "", json.loads("\n".join(data))
                        event_id, data = None, []
        except httpx.TransportError:
            import time

            time.sleep(1)


@chat_app.command("tail")
def chat_tail(
    channel: Annotated[
        str | None, typer.Argument(help="Channel (default: every channel and DM you can see).")
    ] = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing new messages.")] = False,
    lines: Annotated[int, typer.Option("-n", help="How many recent messages to print first.")] = 20,
    home: HomeOpt = None,
) -> None:
    """Print recent messages, and with -f follow live (SSE, resumes after drops)."""
    conn = connect(home)
    channels = (
        [channel.lstrip("#")] if channel else [c["name"] for c in request(conn, "GET", "/api/channels")]
    )
    recent: list[dict[str, Any]] = []
    for name in channels if lines > 0 else []:
        recent += request(conn, "GET", f"/api/channels/{name}/messages", params={"limit": lines})["messages"]
    for msg in sorted(recent, key=lambda m: m["ts"])[-lines:]:
        console.print(format_message(msg), highlight=False)
    console.file.flush()
    if not follow:
        return
    params = {"channel": channel.lstrip("#")} if channel else {}
    try:
        for _, data in sse_events(conn, params):
            if data.get("type") == "message":
                console.print(format_message(data), highlight=False)
                console.file.flush()  # a pipe (| grep, a test) sees each message as it arrives
    except KeyboardInterrupt:
        return


def register_components() -> None:
    """Command groups of the other components (swarm, forge, ...), each owned by its module."""
    from orchestrator.cli import dataset, demo, jobs, prs, swarm, tasks

    swarm.register(app, agent_app)
    prs.register(app)
    jobs.register(app)
    tasks.register(app)
    dataset.register(app)
    demo.register(app)


def main() -> None:
    """Entry point of the ``kswarm`` script."""
    register_components()
    if os.environ.get("KSWARM_DEBUG"):
        app()
    else:
        try:
            app()
        except KeyboardInterrupt:
            sys.exit(130)


if __name__ == "__main__":
    main()
