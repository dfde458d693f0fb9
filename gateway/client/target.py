"""Where the gateway is and how a client proves who it is: the one place a token becomes a header."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

UDS_BASE_URL = "http://kswarm"  # any host works over a unix socket; the gateway admits this one
DEFAULT_URL = "http://127.0.0.1:8765"


def auth_headers(token: str | None) -> dict[str, str]:
    """The headers that carry a gateway token (none without one). REST, SSE, MCP and the Claude Code
    CLI's MCP config all take them from here."""
    return {"Authorization": f"Bearer {token}"} if token else {}


@dataclass(frozen=True)
class GatewayTarget:
    """A gateway and a principal: a URL or a unix socket (the socket wins when both are given), a
    bearer token, and the default timeout of one call."""

    token: str | None
    url: str | None = None
    socket: Path | None = None
    timeout: float = 30.0

    def base_url(self) -> str:
        """The base URL HTTP clients use (``http://kswarm`` over the socket)."""
        return UDS_BASE_URL if self.socket else (self.url or DEFAULT_URL).rstrip("/")

    def headers(self) -> dict[str, str]:
        return auth_headers(self.token)

    def mcp_url(self) -> str:
        return f"{self.base_url()}/mcp"

    def where(self) -> str:
        """Where it is, for messages: the URL, or the socket's path."""
        return f"the socket {self.socket}" if self.socket else self.base_url()
