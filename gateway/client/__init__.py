"""How any process reaches the gateway: the one client package.

- ``target``: ``GatewayTarget`` (a URL or the unix socket, a token) and ``auth_headers`` -- the only
  place a token becomes an ``Authorization`` header;
- ``home``: ``$KSWARM_HOME``'s layout and ``find_gateway`` -- the only place that knows how to find a
  running gateway (``--home``/``KSWARM_HOME``, ``KSWARM_URL``/``KSWARM_TOKEN``);
- ``http``: ``GatewayClient`` / ``AsyncGatewayClient`` (REST and the SSE stream);
- ``errors``: one exception class per kind of failure, each with one wording and one exit code;
- ``text``: control characters, refused by the gateway and shown as escapes by its readers;
- ``jobs``: the worker's side of ``/api/jobs``, typed with the job runner's wire models. It is the one
  module that imports more of ``gateway``, so it is not imported here.

Everything but ``jobs`` imports only httpx and the standard library: the agent image needs this
package and ``agents/``, nothing else of kswarm (``tests/agents/test_agent_imports.py`` checks it).
"""

from gateway.client.errors import (
    BadInput,
    Conflict,
    GatewayCallError,
    GatewayFailed,
    Missing,
    NoGateway,
    Refused,
    TokenRefused,
)
from gateway.client.home import GatewayInfo, find_gateway, kswarm_home, target_from_env
from gateway.client.http import AsyncGatewayClient, GatewayClient
from gateway.client.target import UDS_BASE_URL, GatewayTarget, auth_headers
from gateway.client.text import visible

__all__ = [
    "UDS_BASE_URL",
    "AsyncGatewayClient",
    "BadInput",
    "Conflict",
    "GatewayCallError",
    "GatewayClient",
    "GatewayFailed",
    "GatewayInfo",
    "GatewayTarget",
    "Missing",
    "NoGateway",
    "Refused",
    "TokenRefused",
    "auth_headers",
    "find_gateway",
    "kswarm_home",
    "target_from_env",
    "visible",
]
