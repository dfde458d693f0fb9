"""``kswarm ui``: a fresh one-time login link to the web UI of the current home (``--open``: in a browser).

The link comes from ``POST /api/ui/login-links`` (operators' bearer tokens only): one use, short lived,
no token in it (``docs/ui.md``). ``kswarm up`` and ``kswarm demo --keep`` print one in their banner
through ``ui_lines``. Links are printed with ``typer.echo``, never through Rich, so that no terminal
width (nor a pipe) wraps them.
"""

from __future__ import annotations

import webbrowser
from dataclasses import dataclass
from typing import Annotated

import httpx
import typer

from gateway.client import GatewayClient
from gateway.client.target import auth_headers
from orchestrator.cli.commands import HomeOpt, JsonOpt, connect
from orchestrator.cli.output import print_json

LINK_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Link:
    url: str
    expires_s: int


def link_of(gateway: GatewayClient) -> Link:
    """A new login link, on the URL this CLI reaches the gateway at (the gateway's own over its socket)."""
    reply = gateway.request("POST", "/api/ui/login-links")
    base = gateway.target.url
    url = f"{base.rstrip('/')}{reply['path']}" if base else str(reply["url"])
    return Link(url, int(reply["expires_s"]))


async def new_link(url: str, token: str) -> Link:
    """A new login link from the gateway at ``url``, for callers inside its event loop (``up``, the demo)."""
    async with httpx.AsyncClient(base_url=url, headers=auth_headers(token), timeout=LINK_TIMEOUT_S) as client:
        reply = await client.post("/api/ui/login-links")
        reply.raise_for_status()
        body = reply.json()
    return Link(url.rstrip("/") + str(body["path"]), int(body["expires_s"]))


def ui_lines(url: str, link: Link | None, why: str = "") -> list[str]:
    """The UI's lines for a banner; without a link (the gateway made none), how to make one."""
    lines = [f"UI: {url.rstrip('/')}/ui"]
    if link is not None:
        lines.append(f"login link (one use, {link.expires_s // 60} min): {link.url}")
    else:
        lines.append(f"no login link ({why or 'the gateway made none'}); `kswarm ui` makes one")
    return lines


async def banner_ui_lines(url: str, token: str) -> list[str]:
    """``ui_lines`` with a new link; a failure is said, never raised: it must not stop ``up``."""
    try:
        return ui_lines(url, await new_link(url, token))
    except (httpx.HTTPError, KeyError, ValueError) as exc:
        return ui_lines(url, None, f"{type(exc).__name__}: {exc}")


def echo_lines(lines: list[str]) -> None:
    for line in lines:
        typer.echo(line)


def ui(
    open_browser: Annotated[
        bool, typer.Option("--open", help="Also open the link in a browser (Python's webbrowser).")
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a one-time login link to the web UI (one use, 10 minutes by default; no token in it)."""
    with connect(home) as gateway:
        link = link_of(gateway)
    if as_json:
        print_json({"url": link.url, "expires_s": link.expires_s})
    else:
        typer.echo(link.url)
    if open_browser and not webbrowser.open(link.url):
        typer.echo("no browser could be opened here; open the link above", err=True)
