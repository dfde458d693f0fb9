"""The gateway's REST API (and its SSE stream), sync and async, over TCP or the unix socket.

Used by the CLI, the orchestrator, the worker, the demo and the agents. Every failure is a
``GatewayCallError`` subclass (``gateway.client.errors``, picked by the answer's ``code``): an unreachable
gateway is ``NoGateway``, a 401/403 ``TokenRefused``, a 404 ``Missing``, a 400/422 ``BadInput``, a 409
``Conflict``; a 2xx answer is the parsed JSON (text for a non-JSON body, ``None`` for an empty one).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import httpx

from gateway.client.errors import GatewayCallError, NoGateway, raise_for
from gateway.client.home import kswarm_home, target_from_env
from gateway.client.target import UDS_BASE_URL, GatewayTarget

__all__ = [
    "UDS_BASE_URL",
    "AsyncGatewayClient",
    "GatewayCallError",
    "GatewayClient",
    "GatewayTarget",
    "kswarm_home",
    "parse_sse",
    "target_from_env",
]


def _body(reply: httpx.Response) -> Any:
    if not reply.content:
        return None
    if "json" in reply.headers.get("content-type", "json"):
        return reply.json()
    return reply.text


def _unreachable(target: GatewayTarget, exc: httpx.TransportError) -> NoGateway:
    return NoGateway(f"cannot reach {target.where()}: {str(exc) or type(exc).__name__}")


def parse_sse(lines: Iterable[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event id, data) for each event of a ``text/event-stream`` whose data are JSON."""
    event_id, data = "", []
    for line in lines:
        if line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif line == "" and data:
            yield event_id, json.loads("\n".join(data))
            event_id, data = "", []


class GatewayClient:
    """Synchronous client; use as a context manager or call ``close()``."""

    def __init__(self, target: GatewayTarget) -> None:
        transport = httpx.HTTPTransport(uds=str(target.socket)) if target.socket else None
        self.target = target
        self.http = httpx.Client(
            base_url=target.base_url(), headers=target.headers(), timeout=target.timeout, transport=transport
        )

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, timeout: float | None = None, **kw: Any) -> Any:
        try:
            reply = self.http.request(method, path, timeout=timeout or self.target.timeout, **kw)
        except httpx.TransportError as exc:
            raise _unreachable(self.target, exc) from exc
        raise_for(reply)
        return _body(reply)

    def get(self, path: str, **params: Any) -> Any:
        """``GET path?params``; ``None`` values are left out."""
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def follow_events(
        self, params: Mapping[str, str] | None = None, retry_s: float = 1.0
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event id, data) from ``/api/events``, for ever: a dropped connection is reopened with
        ``Last-Event-ID`` (nothing missed, nothing twice); a refusal (token, ...) raises."""
        last_id: str | None = None
        while True:
            headers = {"Last-Event-ID": last_id} if last_id else {}
            try:
                with self.http.stream(
                    "GET",
                    "/api/events",
                    params=dict(params or {}),
                    headers=headers,
                    timeout=httpx.Timeout(self.target.timeout, read=None),
                ) as reply:
                    if not reply.is_success:
                        reply.read()
                        raise_for(reply)
                    for event_id, data in parse_sse(reply.iter_lines()):
                        last_id = event_id or last_id
                        yield event_id, data
            except httpx.TransportError:
                time.sleep(retry_s)

    # -- operator ---------------------------------------------------------------------------
    def me(self) -> dict[str, Any]:
        return self.request("GET", "/api/me")

    def agents(self) -> list[dict[str, Any]]:
        return self.request("GET", "/api/agents")

    def create_principal(self, name: str, kind: str = "agent", email: str | None = None) -> dict[str, Any]:
        return self.request("POST", "/api/principals", json={"name": name, "kind": kind, "email": email})

    def issue_token(self, name: str) -> str:
        return self.request("POST", f"/api/principals/{name}/tokens")["token"]

    def revoke_tokens(self, name: str) -> int:
        return self.request("DELETE", f"/api/principals/{name}/tokens")["revoked"]

    def set_disabled(self, name: str, disabled: bool) -> None:
        """Needs the gateway's disable/enable routes; a 404/405 means an older gateway (ignored)."""
        try:
            self.request("POST", f"/api/principals/{name}/{'disable' if disabled else 'enable'}")
        except GatewayCallError as exc:
            if exc.status not in (404, 405):
                raise

    def create_channel(self, name: str, topic: str = "") -> dict[str, Any] | None:
        try:
            return self.request("POST", "/api/channels", json={"name": name, "topic": topic})
        except GatewayCallError as exc:
            if exc.status != 409:
                raise
            return None

    def post(self, channel: str, text: str) -> dict[str, Any]:
        return self.request("POST", f"/api/channels/{channel}/messages", json={"text": text})

    def history(self, channel: str, limit: int = 50, after: str | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit}
        if after:
            params["after"] = after
        return self.request("GET", f"/api/channels/{channel}/messages", params=params)["messages"]

    # -- agent ------------------------------------------------------------------------------
    def heartbeat(self, state: str = "idle", doing: str = "") -> None:
        self.request("POST", "/api/heartbeat", json={"state": state, "doing": doing})

    def inbox(self, wait: float = 0, limit: int = 50, ack: bool = True) -> list[dict[str, Any]]:
        params = {"wait": wait, "limit": limit, "ack": ack}
        reply = self.request("GET", "/api/inbox", params=params, timeout=wait + 30)
        return reply["items"]

    def inbox_ack(self, through: str) -> str:
        return str(self.request("POST", "/api/inbox/ack", json={"through": through})["cursor"])


class AsyncGatewayClient:
    """Asynchronous twin of ``GatewayClient`` (same method names, awaitable). ``max_connections``
    bounds the connections of one client that many tasks share (default: httpx's)."""

    def __init__(self, target: GatewayTarget, max_connections: int | None = None) -> None:
        limits: dict[str, Any] = {}
        if max_connections:
            limits["limits"] = httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            )
        transport = httpx.AsyncHTTPTransport(uds=str(target.socket), **limits) if target.socket else None
        self.target = target
        self.http = httpx.AsyncClient(
            base_url=target.base_url(),
            headers=target.headers(),
            timeout=target.timeout,
            transport=transport,
            **limits,
        )

    async def __aenter__(self) -> AsyncGatewayClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def request(self, method: str, path: str, timeout: float | None = None, **kw: Any) -> Any:  # noqa: ASYNC109 - an HTTP timeout, passed to httpx
        try:
            reply = await self.http.request(method, path, timeout=timeout or self.target.timeout, **kw)
        except httpx.TransportError as exc:
            raise _unreachable(self.target, exc) from exc
        raise_for(reply)
        return _body(reply)

    async def get(self, path: str, **params: Any) -> Any:
        """``GET path?params``; ``None`` values are left out."""
        return await self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    async def me(self) -> dict[str, Any]:
        return await self.request("GET", "/api/me")

    async def agents(self) -> list[dict[str, Any]]:
        return await self.request("GET", "/api/agents")

    async def create_principal(
        self, name: str, kind: str = "agent", email: str | None = None
    ) -> dict[str, Any]:
        return await self.request(
            "POST", "/api/principals", json={"name": name, "kind": kind, "email": email}
        )

    async def issue_token(self, name: str) -> str:
        return (await self.request("POST", f"/api/principals/{name}/tokens"))["token"]

    async def revoke_tokens(self, name: str) -> int:
        return (await self.request("DELETE", f"/api/principals/{name}/tokens"))["revoked"]

    async def post(self, channel: str, text: str) -> dict[str, Any]:
        return await self.request("POST", f"/api/channels/{channel}/messages", json={"text": text})

    async def heartbeat(self, state: str = "idle", doing: str = "") -> None:
        await self.request("POST", "/api/heartbeat", json={"state": state, "doing": doing})

    async def inbox(self, wait: float = 0, limit: int = 50, ack: bool = True) -> list[dict[str, Any]]:
        params = {"wait": wait, "limit": limit, "ack": ack}
        reply = await self.request("GET", "/api/inbox", params=params, timeout=wait + 30)
        return reply["items"]

    async def inbox_ack(self, through: str) -> str:
        return str((await self.request("POST", "/api/inbox/ack", json={"through": through}))["cursor"])
