"""A small client for the gateway's REST API, sync and async, over TCP or its unix socket.

Shared by the CLI, the orchestrator and the agents' heartbeat loop. Errors are ``GatewayError`` with
the HTTP status and the gateway's ``detail``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

UDS_BASE_URL = "http://kswarm"  # any host works over a unix socket; the gateway accepts this one


class GatewayError(RuntimeError):
    """A non-2xx answer (status > 0) or an unreachable gateway (status 0)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(
            f"gateway answered {status}: {detail}" if status else f"gateway unreachable: {detail}"
        )
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class GatewayTarget:
    """Where the gateway is and who we are: a URL or a unix socket, and a bearer token."""

    token: str | None
    url: str | None = None
    socket: Path | None = None
    timeout: float = 30.0

    def base_url(self) -> str:
        return UDS_BASE_URL if self.socket else (self.url or "http://127.0.0.1:8765").rstrip("/")

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


def kswarm_home() -> Path:
    return Path(os.environ.get("KSWARM_HOME") or Path.home() / ".kswarm")


def target_from_env(home: Path | None = None) -> GatewayTarget:
    """The operator's target: $KSWARM_URL/$KSWARM_TOKEN, else what ``kswarm up`` wrote in $KSWARM_HOME."""
    home = home or kswarm_home()
    token = os.environ.get("KSWARM_TOKEN")
    if not token and (home / "operator.token").exists():
        token = (home / "operator.token").read_text().strip()
    url = os.environ.get("KSWARM_URL")
    socket = None
    info = home / "gateway.json"
    if not url and info.exists():
        data = json.loads(info.read_text())
        url = data.get("url")
        socket = Path(data["socket"]) if not url and data.get("socket") else None
    return GatewayTarget(token=token, url=url, socket=socket)


def _raise_for(reply: httpx.Response) -> None:
    if reply.is_success:
        return
    try:
        detail = reply.json().get("detail", reply.text)
    except ValueError:
        detail = reply.text
    raise GatewayError(reply.status_code, str(detail))


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
            raise GatewayError(0, str(exc) or type(exc).__name__) from exc
        _raise_for(reply)
        return reply.json() if reply.content else None

    # -- operator ---------------------------------------------------------------------------
    def healthz(self) -> dict[str, Any]:
        return self.request("GET", "/healthz")

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
        except GatewayError as exc:
            if exc.status not in (404, 405):
                raise

    def create_channel(self, name: str, topic: str = "") -> dict[str, Any] | None:
        try:
            return self.request("POST", "/api/channels", json={"name": name, "topic": topic})
        except GatewayError as exc:
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

    def inbox(self, wait: float = 0, limit: int = 50) -> list[dict[str, Any]]:
        reply = self.request("GET", "/api/inbox", params={"wait": wait, "limit": limit}, timeout=wait + 30)
        return reply["items"]


class AsyncGatewayClient:
    """Asynchronous twin of ``GatewayClient`` (same method names, awaitable)."""

    def __init__(self, target: GatewayTarget) -> None:
        transport = httpx.AsyncHTTPTransport(uds=str(target.socket)) if target.socket else None
        self.target = target
        self.http = httpx.AsyncClient(
            base_url=target.base_url(), headers=target.headers(), timeout=target.timeout, transport=transport
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
            raise GatewayError(0, str(exc) or type(exc).__name__) from exc
        _raise_for(reply)
        return reply.json() if reply.content else None

    async def healthz(self) -> dict[str, Any]:
        return await self.request("GET", "/healthz")

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

    async def inbox(self, wait: float = 0, limit: int = 50) -> list[dict[str, Any]]:
        reply = await self.request(
            "GET", "/api/inbox", params={"wait": wait, "limit": limit}, timeout=wait + 30
        )
        return reply["items"]
