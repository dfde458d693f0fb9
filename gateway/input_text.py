"""No control characters in the text the gateway accepts: one guard in front of every route.

Everything an agent writes is shown to someone later -- chat, PR titles and bodies, reviews, task titles,
timelines, ``doing`` -- in a browser, a terminal or a dataset card. A C0/C1 control character other than
newline and tab (an escape sequence, a carriage return, a CSI) has no place in any of it, so the gateway
refuses it at the door: a 400 naming the field, in the shape the path's clients expect (a tool error for
an MCP ``tools/call``, the Gitea or REST shape elsewhere), and nothing is stored.

The guard reads the body of ``POST``/``PUT``/``PATCH`` requests (JSON or a form) and their query string.
It is cheap on the common path: one byte-pattern search that every body with such a character matches
(some bodies without one match too, e.g. a ``\\r`` between JSON tokens); only then is the body parsed to
find the field, or to find there is none. Exempt are the routes whose bodies are not text for readers:
the LLM proxy (``/v1/``: prompts are the model's business), git's smart HTTP (``/git/``: packs), and the
job worker's reports (a kernel's own output, shown through the CLI's escaping)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.client.text import CONTROL
from gateway.error_shapes import error_response
from gateway.errors import GatewayError

METHODS = frozenset({"POST", "PUT", "PATCH"})
EXEMPT = re.compile(r"^/(?:v1/|git/|api/jobs/[^/]+/(?:finish|heartbeat)$|api/jobs/pools/[^/]+/take$)")
MCP_PATH = "/mcp"
# No write of text comes near this (a chat message is 16 KiB, a PR body 64 KiB; the largest body is a
# file upload through the Gitea contents API, base64 of at most a push's pack): past it, a 413.
MAX_BODY = 48 * 1024 * 1024
# Past this many brackets a body may nest deeper than Python's parser recurses (a RecursionError): such
# a body is parsed here first, and refused with a 400 if it does.
MAX_OPENINGS = 500
# A superset of the bodies holding a control character: raw C0 bytes but tab and newline, DEL, C1 as
# UTF-8, and the JSON escapes and percent-encodings that spell them.
_SUSPECT_JSON = re.compile(
    rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\\u00(?:[01][0-9a-fA-F]|7[fF]|[89][0-9a-fA-F])|\\[bfr]"
)
_SUSPECT_FORM = re.compile(rb"%(?:[01][0-9a-fA-F]|7[fF]|[cC]2%[89][0-9a-fA-F])")


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every string in a JSON value (keys included) with the path that names it, in document order
    (a stack, not recursion: a document may nest as deep as the parser allowed)."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            yield where, item
        elif isinstance(item, dict):
            children = []
            for key, child in item.items():
                inner = f"{where}.{key}" if where else str(key)
                children.append((str(key), inner))
                children.append((child, inner))
            stack.extend(reversed(children))
        elif isinstance(item, list):
            stack.extend(reversed([(child, f"{where}[{i}]") for i, child in enumerate(item)]))


def _offence(pairs: Iterator[tuple[str, str]]) -> tuple[str, str] | None:
    for field, text in pairs:
        if found := CONTROL.search(text):
            return field, f"U+{ord(found.group()):04X}"
    return None


def _json_offence(body: bytes) -> tuple[str, str, Any] | None:
    """(field, character, the JSON-RPC request if any) of the first control character in ``body``."""
    try:
        document = json.loads(body, strict=False)
    except ValueError:  # not JSON after all: the route refuses it in its own words
        return None
    except RecursionError:  # nested past what any route takes (and what the routes' parser survives)
        return "body", "nesting", None
    call = document if isinstance(document, dict) and document.get("jsonrpc") else None
    if call is not None and call.get("method") == "tools/call" and isinstance(call.get("params"), dict):
        found = _offence(_strings(call["params"].get("arguments"), "arguments"))
    else:
        found = _offence(_strings(document, ""))
    return None if found is None else (found[0] or "body", found[1], call)


def _form_offence(raw: bytes, where: str) -> tuple[str, str] | None:
    pairs = parse_qsl(raw.decode("latin-1"), keep_blank_values=True, encoding="utf-8", errors="replace")
    found = _offence(pair for key, value in pairs for pair in ((key, key), (key, value)))
    return None if found is None else (f"{where}.{found[0]}", found[1])


def _message(field: str, char: str) -> str:
    if char == "nesting":
        return f"{field}: JSON nested too deeply"
    return f"{field}: control character {char} is not allowed in text (only newline and tab are)"


def _mcp_answer(call: dict[str, Any], message: str) -> JSONResponse:
    """The refusal as MCP clients take it: a tool error for ``tools/call`` (the model reads it and
    tries again), a JSON-RPC invalid-params error for anything else."""
    if call.get("method") == "tools/call":
        result = {"content": [{"type": "text", "text": message}], "isError": True}
        return JSONResponse({"jsonrpc": "2.0", "id": call.get("id"), "result": result})
    error = {"code": -32602, "message": message}
    return JSONResponse({"jsonrpc": "2.0", "id": call.get("id"), "error": error}, 400)


class ControlCharGuard:
    """ASGI middleware: refuse a write whose text holds a control character (see the module)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or scope["method"] not in METHODS or EXEMPT.match(path):
            await self.app(scope, receive, send)
            return
        query: bytes = scope.get("query_string", b"")
        if _SUSPECT_FORM.search(query) and (found := _form_offence(query, "query")):
            await self.refuse(path, _message(*found), None)(scope, receive, send)
            return
        body, receive = await _buffered(receive)
        if body is None:
            too_large = GatewayError(f"request body over {MAX_BODY} bytes", 413)
            await error_response(path, too_large)(scope, receive, send)
            return
        refusal = self.check(path, body, _content_type(scope))
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def check(self, path: str, body: bytes, content_type: str) -> JSONResponse | None:
        if content_type.startswith("application/x-www-form-urlencoded"):
            if _SUSPECT_FORM.search(body) and (found := _form_offence(body, "form")):
                return self.refuse(path, _message(*found), None)
            return None
        suspect = _SUSPECT_JSON.search(body) or body.count(b"[") + body.count(b"{") > MAX_OPENINGS
        if not suspect or (offence := _json_offence(body)) is None:
            return None
        field, char, call = offence
        return self.refuse(path, _message(field, char), call)

    @staticmethod
    def refuse(path: str, message: str, call: dict[str, Any] | None) -> JSONResponse:
        if path == MCP_PATH and call is not None:
            return _mcp_answer(call, message)
        return error_response(path, GatewayError(message, 400))


def _content_type(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            return str(value.decode("latin-1").lower())
    return ""


async def _buffered(receive: Receive) -> tuple[bytes | None, Receive]:
    """The whole body (None past ``MAX_BODY``), and a ``receive`` that hands it on once and then
    whatever the client sends."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client left: let the app see it
            return b"".join(chunks), _replay([message], receive)
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > MAX_BODY:
            return None, receive
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    return body, _replay([{"type": "http.request", "body": body, "more_body": False}], receive)


def _replay(first: list[Message], receive: Receive) -> Receive:
    async def replay() -> Message:
        return first.pop(0) if first else await receive()

    return replay
