"""The gateway's one error hierarchy: every refusal a route, an MCP tool or a service makes.

A ``GatewayError`` carries what every answer needs: ``status`` (the HTTP status), ``code`` (a stable
machine name, ``not_found``, ``rule_violation``, ...), ``message`` (one line for a person; it names the
parameter at fault) and ``headers`` (``Retry-After``, ``WWW-Authenticate``). Code raises the subclass of
its component and never catches one only to translate it: an error becomes an answer in exactly two
places, both built on this module —

- REST: the one exception handler, ``gateway.error_shapes`` (``{"detail"}``; Gitea's shape under
  ``/api/v1/``, Anthropic's under ``/v1/``; an HTML page for a browser under ``/ui``);
- MCP: ``gateway.mcp_server.GatewayMCP``, a tool error ``<message> (HTTP <status>)``.

The module imports nothing of the gateway, so any module (a pure library like ``gateway.jobs.pools``
too) can raise these. ``PluginError`` is not an answer: it stops the gateway from starting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

STATUS_CODES: dict[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    413: "too_large",
    422: "unprocessable",
    429: "rate_limited",
    500: "internal",
    501: "not_implemented",
    502: "bad_gateway",
    503: "unavailable",
    504: "timeout",
}
BEARER_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="kswarm"'}


class GatewayError(Exception):
    """A refused (4xx) or failed (5xx) request: status, code, message and the headers of the answer."""

    status: int = 400
    default_code: ClassVar[str | None] = None  # a subclass's own code; otherwise named by the status

    def __init__(
        self,
        message: str,
        status: int | None = None,
        *,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        self.code = code or self.default_code or STATUS_CODES.get(self.status, "error")
        self.headers: dict[str, str] = dict(headers or {})


# -- by status: for refusals that belong to no one component ------------------------------------------


class BadRequest(GatewayError):
    status = 400


class Unauthorized(GatewayError):
    """No token, or one that is not (or no longer) valid; answers carry the Bearer challenge."""

    status = 401

    def __init__(self, message: str) -> None:
        super().__init__(message, headers=BEARER_CHALLENGE)


class Forbidden(GatewayError):
    status = 403


class NotFound(GatewayError):
    status = 404


# -- per component -------------------------------------------------------------------------------------


class BadMessageId(GatewayError, ValueError):
    """A client-supplied id that is not a message id; the text names the parameter it came in."""

    def __init__(self, param: str) -> None:
        super().__init__(f"{param}: not a message id (expected <ms>-<seq>)", 400, code="bad_message_id")
        self.param = param


class PrincipalError(GatewayError, ValueError):
    """A bad principal request (a reserved or taken name, an unknown principal)."""


class ChatError(GatewayError):
    """A refused chat operation (an unknown channel, a message too large, the sender's rate limit)."""


class ForgeError(GatewayError):
    """A refused forge operation; ``status`` follows Gitea's answer for the same case."""


class JobError(GatewayError):
    """A refused job operation (an unknown pool or job, a ref that does not resolve)."""


class RuleViolation(GatewayError, ValueError):
    """A submission refused by a pool rule; ``rule`` is the rule's name, also in the message."""

    status = 422
    default_code = "rule_violation"

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"refused by rule {rule}: {message}")
        self.rule = rule


class BoardError(GatewayError):
    """A refused task-board operation (a task claimed by another, a lapsed claim)."""


class ProxyError(GatewayError):
    """A refusal or failure of the LLM proxy (a body without max_tokens, an unreachable upstream)."""


class BudgetRefused(ProxyError):
    """The request's worst case does not fit in one of its budgets; SDKs must not retry it."""

    status = 429
    default_code = "budget_exhausted"

    def __init__(self, message: str, scope: str, budget: str) -> None:
        # x-should-retry: false stops the SDKs' automatic retries; no retry-after on purpose.
        headers = {"x-should-retry": "false", "x-kswarm-budget-exhausted": scope, "x-kswarm-budget": budget}
        super().__init__(message, headers=headers)
        self.scope = scope
        self.budget = budget


class UiAuthError(GatewayError):
    """Refused at /ui. ``login``: a browser is sent to the login page instead of an error page."""

    def __init__(self, message: str, status: int, login: bool = False) -> None:
        super().__init__(message, status, headers=BEARER_CHALLENGE if status == 401 else None)
        self.login = login


class PluginError(Exception):
    """The gateway's plugins do not fit together (a missing service, a cycle, a name twice): no start."""
