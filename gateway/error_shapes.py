"""How a ``GatewayError`` becomes an HTTP answer: the one exception handler, and the OpenAPI declaration.

One rule for every route, a plugin's included: the answer's body is ``Refusal`` (``{"detail": str,
"code": str}``, the code from ``gateway.errors.CODES``), except under a prefix that speaks another API's
protocol, whose clients expect that protocol's shape exactly -- the embedded forge's Gitea-compatible
routes (``/api/v1/``: ``{"message", "url"}``) and the LLM proxy's Anthropic-compatible ones (``/v1/``:
``{"type": "error", "error": {"type", "message"}}``). A component may render its own pages under its
prefix (``GatewayContext.error_pages``: the UI's HTML error pages and login redirects for browsers);
everything else is this module's. FastAPI's own answers (request validation, an unknown route) keep
FastAPI's shapes, with the code added; ``declare_error_shapes`` declares them all.

Anything else escaping a route -- a bug, or a library's ``ValueError`` that no one turned into a refusal
-- is a 500 with ``INTERNAL_MESSAGE`` and nothing of its own text (which may hold a path, a query or a
secret), its traceback in the log. Bad input is refused on purpose, with a ``GatewayError``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import validation_error_definition, validation_error_response_definition
from fastapi.responses import JSONResponse, Response
from fastapi.utils import is_body_allowed_for_status_code
from pydantic import BaseModel
from redis.exceptions import RedisError
from starlette.exceptions import HTTPException

from gateway.errors import INTERNAL_MESSAGE, STATUS_CODES, GatewayError
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
VALIDATION_CODE = "invalid_request"  # FastAPI's request validation (a 422 whose detail is a list)
REDIS_LOG_INTERVAL_S = 10.0
log = logging.getLogger("kswarm.redis")
crash_log = logging.getLogger("kswarm.errors")


def error_body(path: str, status: int, message: str, code: str) -> dict[str, Any]:
    """The body of a refusal at ``path``, in the shape its clients expect."""
    if path.startswith(GITEA_PREFIX):
        return {"message": message, "url": ""}
    if path.startswith(ANTHROPIC_PREFIX):
        return {
            "type": "error",
            "error": {"type": ANTHROPIC_TYPES.get(status, "api_error"), "message": message},
        }
    return {"detail": message, "code": code}


def error_response(path: str, exc: GatewayError, message: str | None = None) -> JSONResponse:
    """``exc`` answered at ``path`` (``message``: a redacted text instead of the exception's)."""
    body = error_body(path, exc.status, exc.message if message is None else message, exc.code)
    return JSONResponse(status_code=exc.status, content=body, headers=exc.headers or None)


async def answer_error(request: Request, exc: Exception) -> Response:
    """The gateway's one exception handler: a ``GatewayError`` in the shape of the path's clients."""
    error = exc if isinstance(exc, GatewayError) else GatewayError(INTERNAL_MESSAGE, 500)
    path = request.url.path
    for prefix, page in request.app.state.ctx.error_pages.items():
        if path.startswith(prefix) and (answer := page(request, error)) is not None:
            return answer
    return error_response(path, error)


async def answer_value_error(request: Request, exc: Exception) -> Response:
    """A ``ValueError`` that escaped a route is a library refusing what the route let through, or a bug:
    a 500 like any crash (not a 400 with the library's words), logged with its traceback here."""
    crash_log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return await answer_error(request, exc)


async def answer_http_exception(request: Request, exc: Exception) -> Response:
    """FastAPI's answer for Starlette's ``HTTPException`` (an unknown route, a method not allowed),
    with the code of its status."""
    assert isinstance(exc, HTTPException)
    if not is_body_allowed_for_status_code(exc.status_code):
        return Response(status_code=exc.status_code, headers=exc.headers)
    body = {"detail": exc.detail, "code": STATUS_CODES.get(exc.status_code, "error")}
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)


async def answer_validation_error(request: Request, exc: Exception) -> Response:
    """FastAPI's answer for request validation (``detail``: the list of field errors), with its code."""
    assert isinstance(exc, RequestValidationError)
    body = {"detail": jsonable_encoder(exc.errors()), "code": VALIDATION_CODE}
    return JSONResponse(status_code=422, content=body)


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
    app.add_exception_handler(ValueError, answer_value_error)
    app.add_exception_handler(RedisError, redis_outage_handler())
    app.add_exception_handler(HTTPException, answer_http_exception)
    app.add_exception_handler(RequestValidationError, answer_validation_error)
    # Any other exception: Starlette's outermost middleware answers with this, then re-raises it for
    # the server, which logs the traceback (so it is not logged here as well).
    app.add_exception_handler(Exception, answer_error)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def declare_error_shapes(schema: dict[str, Any]) -> dict[str, Any]:
    """Make ``/openapi.json`` true about errors, for every operation (a plugin's too, unedited).

    FastAPI declares only a 422 of its validation shape (``detail``: a list), while routes refuse with
    a ``GatewayError`` (``detail``: a string) -- a 422 among them. So every operation gets a ``default``
    response, ``Refusal`` (``{"detail": str, "code": str}``), and its 422 becomes "either shape" (the
    validation shape declares its ``code`` too). Under a ``PROTOCOL_ERRORS`` prefix that protocol's
    shape is declared beside them (such routes answer both: refusals in the protocol's shape, FastAPI's
    own answers in its). HTML pages declare HTML error pages too.
    """
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("ValidationError", validation_error_definition)
    validation: dict[str, Any] = dict(validation_error_response_definition)
    code = {"title": "Code", "type": "string", "description": f"Always {VALIDATION_CODE}."}
    validation["properties"] = {**validation["properties"], "code": code}
    schemas["HTTPValidationError"] = validation
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
