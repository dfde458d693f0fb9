"""How a ``GatewayError`` becomes an HTTP answer: the one exception handler, and the OpenAPI declaration.

One rule for every route, a plugin's included: the answer's body is ``Refusal`` (``{"detail": str}``),
except under a prefix that speaks another API's protocol, whose clients expect that protocol's shape —
the embedded forge's Gitea-compatible routes (``/api/v1/``: ``{"message", "url"}``) and the LLM proxy's
Anthropic-compatible ones (``/v1/``: ``{"type": "error", "error": {"type", "message"}}``). A component
may render its own pages under its prefix (``GatewayContext.error_pages``: the UI's HTML error pages and
login redirects for browsers); everything else is this module's. A ``ValueError`` that escapes a route
is a 400 like a ``BadRequest`` (bad input that a library refused). FastAPI's own answers (request
validation, an unknown route) keep FastAPI's shapes; ``declare_error_shapes`` declares them all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import validation_error_definition, validation_error_response_definition
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from redis.exceptions import RedisError

from gateway.errors import BadRequest, GatewayError
from gateway.models import AnthropicError, GiteaError, Refusal

GITEA_PREFIX = "/api/v1/"
ANTHROPIC_PREFIX = "/v1/"
# Routes that speak another API's protocol keep its error shape, declared beside ours.
PROTOCOL_ERRORS: tuple[tuple[str, type[BaseModel]], ...] = (
    (GITEA_PREFIX, GiteaError),
    (ANTHROPIC_PREFIX, AnthropicError),
)
# Anthropic's error types by status, which its SDKs turn into the matching exception.
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    429: "rate_limit_error",
    504: "timeout_error",
}
HTTP_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})
REDIS_LOG_INTERVAL_S = 10.0
log = logging.getLogger("kswarm.redis")


def error_body(path: str, status: int, message: str) -> dict[str, Any]:
    """The body of a refusal at ``path``, in the shape its clients expect."""
    if path.startswith(GITEA_PREFIX):
        return {"message": message, "url": ""}
    if path.startswith(ANTHROPIC_PREFIX):
        return {
            "type": "error",
            "error": {"type": ANTHROPIC_TYPES.get(status, "api_error"), "message": message},
        }
    return {"detail": message}


def error_response(path: str, exc: GatewayError, message: str | None = None) -> JSONResponse:
    """``exc`` answered at ``path`` (``message``: a redacted text instead of the exception's)."""
    body = error_body(path, exc.status, exc.message if message is None else message)
    return JSONResponse(status_code=exc.status, content=body, headers=exc.headers or None)


async def answer_error(request: Request, exc: Exception) -> Response:
    """The gateway's one exception handler (registered for GatewayError and ValueError)."""
    error = exc if isinstance(exc, GatewayError) else BadRequest(str(exc))
    path = request.url.path
    for prefix, page in request.app.state.ctx.error_pages.items():
        if path.startswith(prefix) and (answer := page(request, error)) is not None:
            return answer
    return error_response(path, error)


def redis_outage_handler() -> Callable[[Request, Exception], Awaitable[Response]]:
    """Redis unreachable (or failing) under a route: a 503 with Retry-After in the path's shape, counted
    and logged once per ``REDIS_LOG_INTERVAL_S`` with how many there were -- not a traceback each."""
    state = {"last": -REDIS_LOG_INTERVAL_S, "since": 0}

    async def answer(request: Request, exc: Exception) -> Response:
        request.app.state.ctx.metrics.redis_unavailable.inc()
        state["since"] += 1
        now = time.monotonic()
        if now - state["last"] >= REDIS_LOG_INTERVAL_S:
            log.error("Redis failed under %d request(s) (503): %r", state["since"], exc)
            state["last"], state["since"] = now, 0
        refusal = GatewayError("Redis is unavailable; retry", 503, headers={"Retry-After": "1"})
        return error_response(request.url.path, refusal)

    return answer


def install_error_handler(app: FastAPI) -> None:
    app.add_exception_handler(GatewayError, answer_error)
    app.add_exception_handler(ValueError, answer_error)
    app.add_exception_handler(RedisError, redis_outage_handler())


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def declare_error_shapes(schema: dict[str, Any]) -> dict[str, Any]:
    """Make ``/openapi.json`` true about errors, for every operation (a plugin's too, unedited).

    FastAPI declares only a 422 of its validation shape (``detail``: a list), while routes refuse with
    a ``GatewayError`` (``detail``: a string) -- a 422 among them. So every operation gets a ``default``
    response, ``Refusal`` (``{"detail": str}``), and its 422 becomes "either shape". Under a
    ``PROTOCOL_ERRORS`` prefix that protocol's shape is declared beside them (such routes answer both:
    refusals in the protocol's shape, FastAPI's own answers in its). HTML pages declare HTML error
    pages too.
    """
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("ValidationError", validation_error_definition)
    schemas.setdefault("HTTPValidationError", validation_error_response_definition)
    models: list[type[BaseModel]] = [Refusal, *(m for _, m in PROTOCOL_ERRORS)]
    for model in models:
        definition = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(definition.pop("$defs", {}))
        schemas[model.__name__] = definition
    for path, item in schema.get("paths", {}).items():
        protocol = [_ref(m.__name__) for prefix, m in PROTOCOL_ERRORS if path.startswith(prefix)]
        refusals = [_ref("Refusal"), *protocol]
        refusal = refusals[0] if len(refusals) == 1 else {"anyOf": refusals}
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            responses = operation.setdefault("responses", {})
            content: dict[str, Any] = {"application/json": {"schema": refusal}}
            if any("text/html" in r.get("content", {}) for r in responses.values()):
                content["text/html"] = {"schema": {"type": "string"}}  # a browser's error page
            if "422" in responses:
                responses["422"] = {
                    "description": "Request validation (a list) or a refusal of the request's content",
                    "content": {
                        "application/json": {"schema": {"anyOf": [_ref("HTTPValidationError"), *refusals]}}
                    },
                }
            responses.setdefault(
                "default",
                {"description": "Refused (4xx) or failed (5xx): detail says why", "content": content},
            )
    return schema
