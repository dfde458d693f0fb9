"""The gateway's one error hierarchy: every refusal a route, an MCP tool or a service makes.

A ``GatewayError`` carries what every answer needs: ``status`` (the HTTP status), ``code`` (a stable
machine name from ``CODES``: ``not_found``, ``rule_violation``, ...), ``message`` (one line for a person;
it names the parameter at fault) and ``headers`` (``Retry-After``, ``WWW-Authenticate``). A class with
one meaning has its own code (``RuleViolation``: ``rule_violation``); a component's class, which refuses
with several statuses, carries the code of its status (``ForgeError(..., 404)``: ``not_found``). Code
raises the subclass of its component and never catches one only to translate it: an error becomes an
answer in exactly two places, both built on this module —

- REST: the one exception handler, ``gateway.error_shapes`` (``{"detail", "code"}``; Gitea's shape under
  ``/api/v1/``, Anthropic's under ``/v1/``; an HTML page for a browser under ``/ui``);
- MCP: ``gateway.mcp_server.GatewayMCP``, a tool error ``<message> (HTTP <status>)``.

The client (``gateway.client``) has classes of its own, named differently, which it picks by ``code``.

The module imports nothing of the gateway, so any module (a pure library like ``gateway.client.jobs.pools``
too) can raise these. ``PluginError`` is not an answer: it stops the gateway from starting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

# The vocabulary: every code an error body can carry -> (its status, what it means). docs/gateway.md
# shows this table (tests/gateway/test_error_codes.py keeps the two equal); the client maps these codes.
CODES: dict[str, tuple[int, str]] = {
    # named by the status: what a refusal of that status carries unless its class has a code of its own
    "bad_request": (400, "bad input; the message names the parameter"),
    "unauthorized": (401, "no token, or one unknown, revoked or quarantined (with WWW-Authenticate)"),
    "forbidden": (403, "this principal may not do this"),
    "not_found": (404, "no such thing, or none this token may see"),
    "not_allowed": (405, "not done this way (a merge only the review gate makes, a merge style)"),
    "conflict": (409, "it exists already, or someone else holds it"),
    "too_large": (413, "a body or message over its limit"),
    "unprocessable": (422, "a request the route refuses by its rules"),
    "rate_limited": (429, "too many requests now (with Retry-After)"),
    "internal": (500, "the gateway failed; its log says why, the answer never does"),
    "not_implemented": (501, "this gateway lacks what the request needs"),
    "bad_gateway": (502, "an upstream (the LLM API, Gitea) failed"),
    "unavailable": (503, "a part of the gateway (Redis) is down; retry (with Retry-After)"),
    "timeout": (504, "an upstream did not answer in time"),
    # a code of its own: a refusal a client may want to tell apart from others of its status
    "invalid_request": (422, "FastAPI's request validation: detail is the list of field errors"),
    "bad_message_id": (400, "a parameter that should be a message id (<ms>-<seq>) is not one"),
    "rule_violation": (422, "a job refused by a pool rule, named in the message"),
    "budget_exhausted": (429, "an LLM request that does not fit a budget (x-should-retry: false)"),
    "redis_busy": (503, "every Redis connection stayed busy; retry (with Retry-After)"),
    "error": (0, "a status none of the codes above names"),
}
# The code a refusal of each status carries unless its class names its own (each is in CODES).
STATUS_CODES: dict[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "not_allowed",
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
# What answers an exception that is not a refusal (a bug, a library's ValueError): never its text.
INTERNAL_MESSAGE = "internal error: the gateway's log says why"
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
    """No token, or one that is not (or no longer) valid; answers carry a challenge (Bearer unless the
    route's clients expect another: git asks its credential helper on a Basic one)."""

    status = 401

    def __init__(self, message: str, challenge: Mapping[str, str] = BEARER_CHALLENGE) -> None:
        super().__init__(message, headers=challenge)


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


class CounterexampleError(GatewayError):
    """A refused counterexample (a kernel that is no accepted target, a finder over its budget)."""


class BoardError(GatewayError):
    """A refused task-board operation (a task claimed by another, a lapsed claim)."""


class TooManyWaits(GatewayError):
    """An agent holds all the open waits (inbox waits, event streams) it may (``gateway.waits_budget``)."""

    status = 429
    default_code = "rate_limited"


class ProxyError(GatewayError):
    """A refusal or failure of the LLM proxy (a body without max_tokens, an unreachable upstream)."""


class BooksBusy(ProxyError):
    """An agent's last model call is still being booked past the wait: its next one is not judged
    without it (retryable)."""

    status = 503


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
