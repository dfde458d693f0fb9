"""In-process calls of the gateway's own REST API on behalf of the logged-in operator.

The UI reads every other component (chat, usage, forge, jobs, dataset) through the same ``/api``
routes that the CLI and scripts use, so it applies the same rules and lights up as soon as a
component registers its routes. A call is one ASGI request into the app, with the already
authenticated principal placed where ``gateway.auth.current_principal`` looks first
(``request.state.principal``): no token is stored or re-sent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import FastAPI

from gateway.errors import INTERNAL_MESSAGE
from gateway.principals import Principal

MAX_BODY = 8 * 1024 * 1024
log = logging.getLogger("kswarm.ui")


@dataclass(frozen=True)
class ApiReply:
    status: int
    body: bytes
    content_type: str

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def detail(self) -> str:
        """The error text of a failed call (FastAPI's ``detail``), for showing to the operator."""
        try:
            data = self.json()
        except ValueError:
            return self.body.decode(errors="replace")[:500]
        if isinstance(data, dict) and "detail" in data:
            detail = data["detail"]
            return detail if isinstance(detail, str) else json.dumps(detail)[:500]
        return str(data)[:500]


def segment(value: str) -> str:
    """One path segment, quoted (channel names such as ``dm:a:b`` keep their colons)."""
    return quote(value, safe=":@-_.~")


class InternalApi:
    """Calls ``app``'s routes as ``principal``; one per request."""

    def __init__(self, app: FastAPI, principal: Principal) -> None:
        self.app = app
        self.principal = principal

    async def request(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        body: bytes = b"",
        content_type: str = "application/json",
    ) -> ApiReply:
        query = urlencode({k: v for k, v in (params or {}).items() if v is not None}, doseq=True)
        headers = [(b"host", b"kswarm"), (b"accept", b"application/json")]
        if body:
            headers += [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(body)).encode()),
            ]
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method.upper(),
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": query.encode(),
            "headers": headers,
            "client": ("127.0.0.1", 0),
            "server": ("kswarm", 80),
            "state": {"principal": self.principal},
        }
        sent = False
        status = 500
        content = "application/octet-stream"
        chunks: list[bytes] = []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            nonlocal status, content
            if message["type"] == "http.response.start":
                status = message["status"]
                for name, value in message.get("headers", []):
                    if name.lower() == b"content-type":
                        content = value.decode()
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if sum(map(len, chunks)) > MAX_BODY:
                    raise ValueError(f"{path}: answer larger than {MAX_BODY} bytes")

        try:
            await self.app(scope, receive, send)
        except Exception:  # the app already answered 500 (or the answer was too large): never its text
            log.exception("internal %s %s failed", method, path)
            refusal = {"detail": INTERNAL_MESSAGE, "code": "internal"}
            return ApiReply(500, json.dumps(refusal).encode(), "application/json")
        return ApiReply(status, b"".join(chunks), content)

    async def get(self, path: str, **params: Any) -> ApiReply:
        return await self.request("GET", path, params)

    async def post(self, path: str, data: Any) -> ApiReply:
        return await self.request("POST", path, body=json.dumps(data).encode())


def route_table(app: FastAPI) -> list[tuple[str, frozenset[str]]]:
    """(path template, methods) of every HTTP route, included routers flattened.

    FastAPI >= 0.16x keeps included routers as nodes in ``app.routes`` (``iter_route_contexts``
    flattens them); older versions copied their routes into ``app.routes``.
    """
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # an older FastAPI: app.routes is already flat
        routes: Iterable[Any] = app.routes
    else:
        routes = iter_route_contexts(app.routes)
    table = []
    for route in routes:
        path, methods = getattr(route, "path", None), getattr(route, "methods", None)
        if path and methods:
            table.append((path, frozenset(methods)))
    return table


def get_routes(app: FastAPI, prefix: str) -> list[str]:
    """Paths of the parameterless GET routes under ``prefix`` (what a panel can list)."""
    base = prefix.rstrip("/")
    return sorted(
        {
            path
            for path, methods in route_table(app)
            if "GET" in methods and "{" not in path and (path == base or path.startswith(base + "/"))
        }
    )


def has_route(app: FastAPI, path: str, method: str = "GET") -> bool:
    """Whether a route with exactly this path template and method is registered."""
    return any(p == path and method in methods for p, methods in route_table(app))
