"""What can go wrong when a client talks to the gateway: one exception class per kind of failure.

Every class has one wording (``line()``: ``<prefix>: <the gateway's reason> (HTTP <status>)``) and one
exit code, which the CLI uses as they are (``docs/cli.md``). The client raises them for every call
(REST, SSE), so no caller can mistake a refused token for a missing gateway, or an error for a result.

The class is picked by the ``code`` of the gateway's answer (``{"detail", "code"}``; the vocabulary is
``gateway.errors.CODES``, listed in docs/gateway.md), and by the HTTP status when the answer carries no
code this module knows (Gitea's and Anthropic's shapes, a proxy's page, a newer gateway's code). These
classes are the client's, named apart from the server's (``gateway.errors``): ``GatewayCallError`` is
any failed call, ``Missing`` a 404.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import httpx

MAX_DETAIL = 600  # characters of the gateway's reason kept in one line


def one_line(text: str) -> str:
    """``text`` on one line (newlines and runs of spaces folded), cut to ``MAX_DETAIL`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= MAX_DETAIL else flat[: MAX_DETAIL - 3] + "..."


class GatewayCallError(RuntimeError):
    """Any failed gateway call. ``status`` is the HTTP status (0: no answer at all), ``detail`` the
    gateway's reason on one line, ``code`` the gateway's name for it (``""``: the answer had none).
    Subclasses say which kind of failure it is."""

    exit_code: ClassVar[int] = 1
    prefix: ClassVar[str] = "the gateway failed"

    def __init__(self, status: int, detail: str, code: str = "") -> None:
        self.status = status
        self.detail = one_line(detail)
        self.code = code
        super().__init__(self.line())

    def line(self) -> str:
        """The one-line message a person reads (the CLI prints exactly this after ``error:``)."""
        suffix = f" (HTTP {self.status})" if self.status else ""
        return f"{self.prefix}: {self.detail}{suffix}"


class NoGateway(GatewayCallError):
    """There is no gateway to talk to: none is running for this home, or it does not answer."""

    exit_code = 3
    prefix = "no gateway"

    def __init__(self, detail: str) -> None:
        super().__init__(0, detail)


class TokenRefused(GatewayCallError):
    """401 or 403: the token is unknown, revoked, disabled, or not allowed to do this."""

    exit_code = 1
    prefix = "the gateway refused the token"


class Missing(GatewayCallError):
    """404: no such thing (or none this token may see, which the gateway answers the same way)."""

    exit_code = 4
    prefix = "not found"


class BadInput(GatewayCallError):
    """400, 413 or 422: the request itself is wrong; the detail is the gateway's reason (per field)."""

    exit_code = 2
    prefix = "bad input"


class Refused(GatewayCallError):
    """Another 4xx (405, 429, ...): the request is well-formed but the gateway will not do it now."""

    exit_code = 1
    prefix = "the gateway refused the request"


class Conflict(Refused):
    """409: it exists already, or someone else holds it (e.g. another worker serves this node)."""

    prefix = "conflict"


class GatewayFailed(GatewayCallError):
    """5xx (or an answer that is not HTTP at all): the gateway broke; its log says why."""

    exit_code = 1
    prefix = "the gateway failed"


# The gateway's codes (gateway.errors.CODES) -> the class; each agrees with its status's class below.
ERRORS_BY_CODE: dict[str, type[GatewayCallError]] = {
    "bad_request": BadInput,
    "bad_message_id": BadInput,
    "too_large": BadInput,
    "unprocessable": BadInput,
    "invalid_request": BadInput,
    "rule_violation": BadInput,
    "unauthorized": TokenRefused,
    "forbidden": TokenRefused,
    "not_found": Missing,
    "conflict": Conflict,
    "not_allowed": Refused,
    "rate_limited": Refused,
    "budget_exhausted": Refused,
    "internal": GatewayFailed,
    "not_implemented": GatewayFailed,
    "bad_gateway": GatewayFailed,
    "unavailable": GatewayFailed,
    "redis_busy": GatewayFailed,
    "timeout": GatewayFailed,
}
# An answer without a code this module knows: by its status.
ERRORS_BY_STATUS: dict[int, type[GatewayCallError]] = {
    400: BadInput,
    401: TokenRefused,
    403: TokenRefused,
    404: Missing,
    409: Conflict,
    413: BadInput,
    422: BadInput,
}


def error_for(status: int, detail: str, code: str = "") -> GatewayCallError:
    """The exception for a non-2xx answer: by its ``code``, else by its status."""
    kind = (
        ERRORS_BY_CODE.get(code)
        or ERRORS_BY_STATUS.get(status)
        or (Refused if 400 <= status < 500 else GatewayFailed)
    )
    return kind(status, detail, code)


def describe(value: Any) -> str:
    """A reason from an error body: a string, FastAPI's list of field errors, or ``{message: ...}``."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "; ".join(describe(item) for item in value) or "(no reason given)"
    if isinstance(value, dict):
        if "msg" in value:  # one FastAPI validation error: name the field
            where = ".".join(str(part) for part in value.get("loc") or [] if part not in ("body", "query"))
            return f"{where}: {value['msg']}" if where else str(value["msg"])
        for key in ("message", "detail", "error"):
            if key in value:
                return describe(value[key])
    return json.dumps(value)


def reason_of(reply: httpx.Response) -> tuple[str, str]:
    """The gateway's reason and code for a failed answer, whatever shape it has: ``{"detail": ...,
    "code": ...}`` (the gateway's, FastAPI's), ``{"message": ...}`` (Gitea-shaped), ``{"error":
    {"message": ...}}`` (Anthropic-shaped) or text; the code is ``""`` where the answer has none."""
    try:
        body = reply.json()
    except ValueError:
        return reply.text.strip() or reply.reason_phrase or "(no reason given)", ""
    code = body.get("code") if isinstance(body, dict) else None
    return describe(body), code if isinstance(code, str) else ""


def raise_for(reply: httpx.Response) -> None:
    """Nothing for a 2xx answer; the matching ``GatewayCallError`` otherwise."""
    if not reply.is_success:
        raise error_for(reply.status_code, *reason_of(reply))
