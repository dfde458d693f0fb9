"""``$KSWARM_GIT_URL`` for the agent's bash: where ``git clone/push`` reaches the gateway's forge.

git speaks HTTP over TCP only, and an agent on the process backend (or in a container) reaches the
gateway by its unix socket alone. So, on the first ``bash`` call that needs it, a loopback bridge
(``agents.bridge.SocketBridge``, the one the Claude Code runtime uses for the proxy) is started inside
the agent and ``$KSWARM_GIT_URL`` = ``http://127.0.0.1:<port>/git`` is put in bash's environment; over
TCP it is the gateway's own ``/git``. The bridge adds no credential: git authenticates with the agent's
own token through the credential helper the orchestrator provisions (``~/.gitconfig``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from agents.bridge import SocketBridge

GIT_URL_ENV = "KSWARM_GIT_URL"


class GitRemote:
    """Finds (or opens, once) the URL of the gateway's git service for one agent."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.preset = env.get(GIT_URL_ENV)
        self.gateway_url = env.get("KSWARM_GATEWAY_URL")
        socket = env.get("KSWARM_GATEWAY_SOCKET")
        self.socket = Path(socket) if socket else None
        self.bridge: SocketBridge | None = None
        self.lock = asyncio.Lock()

    async def url(self) -> str | None:
        """The git base URL (``<url>/<org>/<repo>.git``), or None when the gateway is unknown."""
        if self.preset:
            return self.preset
        if self.gateway_url:
            return self.gateway_url.rstrip("/") + "/git"
        if self.socket is None:
            return None
        async with self.lock:
            if self.bridge is None:
                bridge = SocketBridge(self.socket)
                await bridge.__aenter__()
                self.bridge = bridge
        return f"{self.bridge.url}/git"

    async def aclose(self) -> None:
        bridge, self.bridge = self.bridge, None
        if bridge is not None:
            await bridge.__aexit__(None, None, None)
