"""The LLM proxy: ``POST /v1/messages`` and ``/v1/messages/count_tokens`` for agents.

An agent calls the gateway with its own token (``Authorization: Bearer`` from the anthropic SDK, or
``x-api-key`` from the Claude Code CLI); the proxy checks its budget, waits for one of the global
concurrency slots, and forwards the request body untouched to the configured upstream with the real
key. Upstream 429/529/5xx answers and connection failures are retried with exponential backoff that
honours ``retry-after`` (capped). SSE streams pass through chunk by chunk while their
``message_start`` / ``message_delta`` usage is read on the side; JSON answers pass through whole.
The real key is scrubbed from every byte that goes back to an agent. See docs/llm-proxy.md.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import httpx
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.auth import current_principal
from gateway.context import GatewayContext
from gateway.llm_config import LLMProxySettings
from gateway.principals import Principal, PrincipalKind
from gateway.sse_scrub import SSEKeyScrubber
from gateway.usage import Usage, UsageMetrics, UsageStore, build_usage_router, register_usage_tool

log = logging.getLogger("kswarm.llm_proxy")

REDACTED = b"[redacted]"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})
RETRY_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError)
REQUEST_HEADERS = ("anthropic-version", "anthropic-beta", "content-type", "accept", "user-agent", "x-app")
RESPONSE_HEADERS = ("content-type", "request-id", "retry-after", "retry-after-ms", "x-should-retry")
SENDER = "gateway"  # the gate principal that posts budget notices to #ops
ALLOWED_KINDS = (PrincipalKind.agent, PrincipalKind.operator)
MAX_SSE_LINE = 1 << 20  # usage events are small; longer lines are passed through unparsed


def anthropic_error(
    status: int, error_type: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """An error in Anthropic's format, which the SDKs turn into the matching exception."""
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    return JSONResponse(status_code=status, content=body, headers=headers)


class KeyScrubber:
    """Replaces the key in a byte stream, also when it is split across chunks.

    Only a chunk's tail that could begin the key is held back, so SSE events (which end in a
    newline, never part of a key) are not delayed.
    """

    def __init__(self, secret: bytes | None) -> None:
        self.secret = secret or b""
        self.pending = b""

    def scrub(self, data: bytes) -> bytes:
        return data.replace(self.secret, REDACTED) if self.secret else data

    def feed(self, chunk: bytes) -> bytes:
        if not self.secret:
            return chunk
        data = (self.pending + chunk).replace(self.secret, REDACTED)
        keep = 0
        for n in range(min(len(self.secret) - 1, len(data)), 0, -1):
            if data.endswith(self.secret[:n]):
                keep = n
                break
        self.pending = data[len(data) - keep :] if keep else b""
        return data[: len(data) - keep]

    def flush(self) -> bytes:
        out, self.pending = self.pending, b""
        return out


class SSEUsage:
    """Reads usage and model out of an Anthropic SSE stream without changing a byte of it."""

    def __init__(self) -> None:
        self.usage = Usage()
        self.model: str | None = None
        self.seen = False
        self._line = b""

    def feed(self, chunk: bytes) -> None:
        lines = (self._line + chunk).split(b"\n")
        self._line = lines.pop()
        if len(self._line) > MAX_SSE_LINE:
            self._line = b""
        for line in lines:
            if line.startswith(b"data:") and (b'"message_start"' in line or b'"message_delta"' in line):
                self._event(line[5:])

    def _event(self, raw: bytes) -> None:
        try:
            event = json.loads(raw)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        if event.get("type") == "message_start" and isinstance(event.get("message"), dict):
            self.seen = True
            self.model = event["message"].get("model") or self.model
            self.usage.merge(event["message"].get("usage"))
        elif event.get("type") == "message_delta":
            self.usage.merge(event.get("usage"))


def parse_retry_after(headers: httpx.Headers) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return max(0.0, float(ms) / 1000)
    except ValueError:
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class ProxyError(Exception):
    """A refusal or failure answered in Anthropic's error format (bad token, unreachable upstream)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Slot:
    """One of the global concurrency slots; ``release`` is idempotent."""

    def __init__(self, proxy: LLMProxy) -> None:
        self.proxy = proxy
        self.held = False

    async def acquire(self) -> None:
        metrics = self.proxy.metrics
        metrics.queued.inc()
        try:
            await self.proxy.slots.acquire()
        finally:
            metrics.queued.dec()
        self.held = True
        metrics.in_flight.inc()

    def release(self) -> None:
        if self.held:
            self.held = False
            self.proxy.slots.release()
            self.proxy.metrics.in_flight.dec()


class ProxyStream(StreamingResponse):
    """An upstream SSE stream passed through; usage recorded at the end, cleanup on every exit."""

    def __init__(
        self,
        proxy: LLMProxy,
        upstream: httpx.Response,
        slot: Slot,
        principal: Principal,
        headers: dict[str, str],
    ) -> None:
        self.proxy = proxy
        self.upstream = upstream
        self.slot = slot
        self.principal = principal
        self.parser = SSEUsage()
        self.scrubber = SSEKeyScrubber(proxy.secret)  # also catches a key spelled out across deltas
        self.recorded = False
        self.closed = False
        self.chunks = self._chunks()
        super().__init__(self.chunks, status_code=upstream.status_code, headers=headers)

    async def _chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.upstream.aiter_bytes():
                self.parser.feed(chunk)
                if out := self.scrubber.feed(chunk):
                    yield out
        except httpx.HTTPError as exc:
            log.warning("upstream stream broke for %s: %s", self.principal.name, type(exc).__name__)
            error = {"type": "error", "error": {"type": "api_error", "message": "upstream stream broke"}}
            yield self.scrubber.flush() + b"event: error\ndata: " + json.dumps(error).encode() + b"\n\n"
        if tail := self.scrubber.flush():
            yield tail
        # Recorded before the stream's last byte, so a client that has read it sees its usage.
        await self._record()

    async def _record(self) -> None:
        if self.recorded or not self.parser.seen:
            return
        self.recorded = True
        await self.proxy.record(self.principal, self.parser.model, self.parser.usage)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.close()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            await self.chunks.aclose()
            await self.upstream.aclose()
            await self._record()  # a client that went away still spent what it spent
        finally:
            self.slot.release()


class LLMProxy:
    """One per app: the upstream client, the concurrency slots, usage and metrics."""

    def __init__(self, ctx: GatewayContext, settings: LLMProxySettings) -> None:
        self.ctx = ctx
        self.settings = settings
        self.metrics = UsageMetrics(ctx.metrics.registry)
        self.usage = UsageStore(ctx.redis, settings, self.metrics)
        key = settings.key()
        self.secret = key.encode() if key else None
        self.slots = asyncio.Semaphore(settings.max_concurrency)  # replaced per lifespan (event loop)
        self.client: httpx.AsyncClient | None = None
        self.sender: Principal | None = None

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        timeout = httpx.Timeout(self.settings.timeout, connect=self.settings.connect_timeout)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        async with httpx.AsyncClient(
            base_url=self.settings.upstream_url.rstrip("/"),
            timeout=timeout,
            limits=limits,
            trust_env=self.settings.trust_env,
        ) as client:
            self.client = client
            self.slots = asyncio.Semaphore(self.settings.max_concurrency)
            try:
                yield
            finally:
                self.client = None

    # -- helpers ------------------------------------------------------------------------------

    def scrub_text(self, text: str) -> str:
        return text.replace(self.secret.decode(), REDACTED.decode()) if self.secret else text

    def upstream_headers(self, request: Request) -> dict[str, str]:
        headers = {k: v for k in REQUEST_HEADERS if (v := request.headers.get(k))}
        headers.setdefault("anthropic-version", self.settings.anthropic_version)
        headers.setdefault("content-type", "application/json")
        headers["accept-encoding"] = "identity"  # pass bytes through as they come
        if key := self.settings.key():
            if self.settings.key_header == "bearer":
                headers["authorization"] = f"Bearer {key}"
            else:
                headers["x-api-key"] = key
        return headers

    def response_headers(self, upstream: httpx.Response) -> dict[str, str]:
        out = {}
        for name, value in upstream.headers.items():
            if name in RESPONSE_HEADERS or name.startswith("anthropic-ratelimit-"):
                out[name] = self.scrub_text(value)
        return out

    def backoff(self, attempt: int) -> float:
        delay = min(self.settings.backoff_initial * 2**attempt, self.settings.backoff_max)
        return delay * (1 - 0.25 * random.random())

    async def authenticate(self, request: Request) -> Principal:
        try:
            principal = await current_principal(request)
        except HTTPException as exc:
            raise ProxyError(401, str(exc.detail)) from None
        if principal.kind not in ALLOWED_KINDS:
            raise ProxyError(403, f"{principal.kind.value} principals may not use the LLM proxy")
        return principal

    async def post_notices(self, notices: list[str]) -> None:
        for text in notices:
            log.warning("%s", text)
            try:
                if self.sender is None:  # created on first use: no side effect at start-up
                    self.sender, _ = await self.ctx.principals.ensure(SENDER, PrincipalKind.gate)
                await self.ctx.chat.notify(self.sender, self.settings.ops_channel, text)
            except Exception as exc:  # best effort: the refusal matters more than its notice
                log.error("could not post the budget notice to #%s: %r", self.settings.ops_channel, exc)

    async def record(self, principal: Principal, model: str | None, usage: Usage) -> None:
        verdict = await self.usage.record(principal.name, model, usage)
        if verdict is not None and verdict.notices:
            await self.post_notices(verdict.notices)

    # -- upstream ----------------------------------------------------------------------------

    async def send(self, request: Request, body: bytes) -> httpx.Response:
        """The upstream's answer (headers read, body not yet), retrying what is worth retrying."""
        assert self.client is not None, "the LLM proxy's lifespan is not running"
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        headers = self.upstream_headers(request)
        attempt = 0
        while True:
            upstream_request = self.client.build_request("POST", path, headers=headers, content=body)
            try:
                response = await self.client.send(upstream_request, stream=True)
            except RETRY_ERRORS as exc:
                if attempt >= self.settings.max_retries:
                    raise ProxyError(502, f"upstream unreachable: {type(exc).__name__}") from None
                reason, delay = "connection", self.backoff(attempt)
            except httpx.TimeoutException as exc:
                raise ProxyError(504, f"upstream timed out: {type(exc).__name__}") from None
            except httpx.HTTPError as exc:
                raise ProxyError(502, f"upstream error: {type(exc).__name__}") from None
            else:
                retryable = response.status_code in RETRY_STATUSES
                if not retryable or attempt >= self.settings.max_retries:
                    return response
                if response.headers.get("x-should-retry") == "false":
                    return response
                reason = str(response.status_code)
                delay = parse_retry_after(response.headers)
                delay = self.backoff(attempt) if delay is None else delay
                await response.aclose()
            self.metrics.retries.labels(reason=reason).inc()
            attempt += 1
            await asyncio.sleep(min(delay, self.settings.retry_after_max))

    async def forward(self, request: Request, limited: bool, record: bool) -> Response:
        started = time.perf_counter()
        try:
            principal = await self.authenticate(request)
            if record and (verdict := await self.usage.check(principal.name)) is not None:
                await self.post_notices(verdict.notices)
                # x-should-retry: false stops the SDKs' automatic retries; no retry-after on purpose.
                headers = {"x-should-retry": "false", "x-kswarm-budget-exhausted": verdict.scope}
                return self.answer(anthropic_error(429, "rate_limit_error", verdict.message(), headers))
            body = await request.body()
            slot = Slot(self)
            if limited:
                await slot.acquire()
            try:
                upstream = await self.send(request, body)
            except BaseException:
                slot.release()
                raise
        except ProxyError as exc:
            kinds = {401: "authentication_error", 403: "permission_error", 504: "timeout_error"}
            error_type = kinds.get(exc.status, "api_error")
            return self.answer(anthropic_error(exc.status, error_type, self.scrub_text(str(exc))))
        self.metrics.seconds.observe(time.perf_counter() - started)
        headers = self.response_headers(upstream)
        if upstream.headers.get("content-type", "").startswith("text/event-stream"):
            headers.setdefault("cache-control", "no-cache")
            self.metrics.requests.labels(status=str(upstream.status_code)).inc()
            return ProxyStream(self, upstream, slot, principal, headers)
        try:
            data = await upstream.aread()
        except httpx.HTTPError as exc:
            return self.answer(anthropic_error(502, "api_error", f"upstream broke: {type(exc).__name__}"))
        finally:
            await upstream.aclose()
            slot.release()
        if record and upstream.status_code == 200:
            await self.record_json(principal, data)
        response = Response(KeyScrubber(self.secret).scrub(data), upstream.status_code, headers)
        return self.answer(response)

    def answer(self, response: Response) -> Response:
        self.metrics.requests.labels(status=str(response.status_code)).inc()
        return response

    async def record_json(self, principal: Principal, data: bytes) -> None:
        try:
            message = json.loads(data)
        except ValueError:
            return
        if isinstance(message, dict) and isinstance(message.get("usage"), dict):
            usage = Usage()
            usage.merge(message["usage"])
            await self.record(principal, message.get("model"), usage)


Lifespan = Callable[[], AbstractAsyncContextManager[None]]


def make_llm_proxy_plugin(
    settings: LLMProxySettings | None = None,
) -> Callable[[FastAPI, GatewayContext, Any], Lifespan]:
    """A gateway plugin with explicit settings (tests, benchmarks); default: from the environment."""

    def plugin(app: FastAPI, ctx: GatewayContext, mcp: Any) -> Lifespan:
        proxy = LLMProxy(ctx, settings or LLMProxySettings())
        ctx.extras["llm_proxy"] = proxy
        ctx.extras["llm_usage"] = proxy.usage

        @app.post("/v1/messages", summary="Anthropic Messages API, proxied with the real key (agents)")
        async def messages(request: Request) -> Response:
            return await proxy.forward(request, limited=True, record=True)

        @app.post("/v1/messages/count_tokens", summary="Anthropic token counting, proxied (agents)")
        async def count_tokens(request: Request) -> Response:
            return await proxy.forward(request, limited=False, record=False)

        app.include_router(build_usage_router(proxy.usage))
        if mcp is not None:
            register_usage_tool(mcp, proxy.usage)
        return proxy.lifespan

    return plugin


def llm_proxy_plugin(app: FastAPI, ctx: GatewayContext, mcp: Any) -> Lifespan:
    """The LLM proxy plugin, configured from ``KSWARM_LLM_*`` (and ``ANTHROPIC_API_KEY``)."""
    return make_llm_proxy_plugin()(app, ctx, mcp)
