"""The LLM proxy: ``POST /v1/messages`` and ``/v1/messages/count_tokens`` for agents.

An agent calls the gateway with its own token (``Authorization: Bearer`` from the anthropic SDK, or
``x-api-key`` from the Claude Code CLI); every call waits for one of the global concurrency slots and
passes the agent's books: a Messages request reserves its worst-case cost against every budget that
applies, a token count only checks that no budget is used up and no hold stops the agent (either is
refused with a 429 naming the budget). The body goes untouched to the configured upstream with the
real key, the query string only when it is the one the Messages API defines (``beta=true``); when the
answer is over (or failed, or the client left) the reservation is settled to the real usage, and
usage beyond the reservation stops the agent until an operator clears it. Upstream 429/529/5xx
answers and connection failures are retried with exponential backoff that honours ``retry-after``
(capped). SSE streams pass through chunk by chunk while their ``message_start`` / ``message_delta``
usage is read on the side; JSON answers pass through whole.
The real key is scrubbed from every byte that goes back to an agent. See docs/llm-proxy.md.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import time
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, NoReturn

from fastapi import Request
from fastapi.responses import Response
from redis.exceptions import RedisError

from gateway.auth import current_principal
from gateway.cancellation import nap, rounds
from gateway.context import GatewayContext
from gateway.error_shapes import error_response
from gateway.errors import BudgetRefused, GatewayError, ProxyError, Unauthorized
from gateway.llm.books import BOOK_KEYS, TOKEN_FIELDS, TOKEN_TYPES, Reservation, Usage
from gateway.llm.config import LLMProxySettings
from gateway.llm.leases import BudgetLeases
from gateway.llm.refusals import BudgetRefusal, Hold
from gateway.llm.sse_scrub import KeyScrubber
from gateway.llm.stream import ProxyStream, Slot
from gateway.llm.upstream import Upstream, UpstreamBroke, UpstreamFailed, UpstreamResponse
from gateway.llm.usage import UsageStore
from gateway.llm.usage_api import UsageMetrics
from gateway.principals import Principal, PrincipalKind

log = logging.getLogger("kswarm.llm_proxy")

REDACTED = b"[redacted]"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})
REQUEST_HEADERS = ("anthropic-version", "anthropic-beta", "content-type", "accept", "user-agent", "x-app")
RESPONSE_HEADERS = ("content-type", "request-id", "retry-after", "retry-after-ms", "x-should-retry")
SENDER = "gateway"  # the gate principal that posts budget notices to #ops
ALLOWED_KINDS = (PrincipalKind.agent, PrincipalKind.operator)
NO_RETRY = {"x-should-retry": "false"}
# The only query string forwarded: the Messages API defines no query parameter; Claude Code (the
# anthropic TypeScript SDK's beta calls) adds ``?beta=true``. Anything else is refused, never forwarded.
FORWARDED_QUERY = "beta=true"


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
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


class DuplicateKey(ValueError):
    """A JSON object with the same key twice (the key is the message)."""


def forwarded_query(query: str) -> str:
    """The query string to send upstream (``?beta=true`` or nothing), or a 400 naming what was sent."""
    if query in ("", FORWARDED_QUERY):
        return f"?{query}" if query else ""
    shown = query if len(query) <= 80 else query[:80] + "..."
    raise ProxyError(
        f"query string {shown!r} refused: the Messages API defines no query parameters, and the proxy "
        f"forwards only {FORWARDED_QUERY} (Claude Code's beta calls)",
        400,
    )


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s object hook that refuses duplicate keys."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(repr(key))
        out[key] = value
    return out


class LLMProxy:
    """One per app: the upstream client, the concurrency slots, reservations, usage and metrics."""

    def __init__(self, ctx: GatewayContext, settings: LLMProxySettings) -> None:
        self.ctx = ctx
        self.settings = settings
        self.metrics = UsageMetrics(ctx.metrics.registry)
        cache = ctx.tokens.cache

        def guard() -> int | None:
            """Leases are used under the token cache's lease on its subscription (gateway.llm.leases)."""
            return cache.generation if cache.usable() else None

        leases = BudgetLeases(
            ctx.redis, settings, BOOK_KEYS, guard, self.metrics.leases_granted, self.metrics.lease_draws
        )
        self.usage = UsageStore(ctx.redis, settings, leases)
        key = settings.key()
        self.secret = key.encode() if key else None
        self.slots = asyncio.Semaphore(settings.max_concurrency)  # replaced per lifespan (event loop)
        self.upstream = Upstream(settings)
        self.sender: Principal | None = None
        # This process's unsettled reservations, renewed while held. Weak: a reservation whose
        # request vanished without settling (its stream object dropped) is no longer renewed, so it
        # expires instead of holding budget for as long as the process lives.
        self.live: weakref.WeakValueDictionary[str, Reservation] = weakref.WeakValueDictionary()

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        async with self.upstream.running():
            self.slots = asyncio.Semaphore(self.settings.max_concurrency)
            try:
                await self.usage.rearm_swarm_notices()
            except RedisError as exc:  # the proxy starts all the same; the notice may not repeat
                log.warning("could not re-arm the swarm's budget notices: %r", exc)
            renewer = asyncio.create_task(self._renew_reservations(), name="llm-reservation-renewer")
            leases = self.usage.leases
            upkeep = asyncio.create_task(leases.upkeep(), name="llm-lease-upkeep") if leases else None
            try:
                yield
            finally:
                renewer.cancel()
                if upkeep is not None:
                    upkeep.cancel()
                await self.usage.drain()
                if leases is not None:  # after the settlements: their draws' scripts have run
                    await leases.close()

    async def _renew_reservations(self) -> None:
        """Keep this process's reservations (and the budget leases it answers for) alive: a crashed
        gateway's expire after the TTL."""
        for _ in rounds():
            await nap(self.settings.reservation_ttl / 3)
            try:
                leases = self.usage.leases.owned_ids() if self.usage.leases is not None else []
                await self.usage.renew([*self.live.keys(), *leases])
            except Exception as exc:  # Redis away: the next round tries again
                log.warning("could not renew LLM budget reservations: %r", exc)

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

    def response_headers(self, upstream: UpstreamResponse) -> dict[str, str]:
        out = {}
        for name, value in upstream.header_items():
            if name in RESPONSE_HEADERS or name.startswith("anthropic-ratelimit-"):
                out[name] = self.scrub_text(value)
        return out

    def backoff(self, attempt: int) -> float:
        delay = min(self.settings.backoff_initial * 2**attempt, self.settings.backoff_max)
        return delay * (1 - 0.25 * random.random())

    @staticmethod
    async def authenticate(request: Request) -> Principal:
        """The caller, or a 401/403 that no client retries: ``x-should-retry: false`` makes the
        anthropic SDKs and the Claude Code CLI stop at once (a bad token stays bad)."""
        try:
            principal = await current_principal(request)
        except Unauthorized as exc:
            raise ProxyError(exc.message, 401, code=exc.code, headers={**exc.headers, **NO_RETRY}) from None
        if principal.kind not in ALLOWED_KINDS:
            raise ProxyError(
                f"{principal.kind.value} principals may not use the LLM proxy", 403, headers=NO_RETRY
            )
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

    @staticmethod
    def bounds(body: bytes) -> tuple[str | None, int]:
        """The model and max_tokens of a Messages request (400 without a usable max_tokens: its
        cost could not be bounded).

        The upstream must see the same max_tokens as the reservation, so a body with a duplicate
        key is refused: parsers differ on which one wins. Checking keys costs a Python call per
        object, so it runs only when a duplicate is possible: a key spelt with \\u escapes, or
        "max_tokens" / "model" appearing more than once."""
        suspicious = body.count(b'"max_tokens"') != 1 or body.count(b'"model"') > 1 or b"\\u" in body
        try:
            message = json.loads(body, object_pairs_hook=unique_keys if suspicious else None)
        except DuplicateKey as exc:
            raise ProxyError(f"duplicate key {exc} in the request body", 400) from None
        except ValueError:
            raise ProxyError("the request body is not JSON", 400) from None
        max_tokens = message.get("max_tokens") if isinstance(message, dict) else None
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens < 2**31:
            raise ProxyError("max_tokens: a positive integer is required (it bounds the reservation)", 400)
        model = message.get("model")
        return (model if isinstance(model, str) else None), max_tokens

    async def reserve(
        self, principal: Principal, body: bytes, model: str | None, max_tokens: int
    ) -> Reservation:
        """Reserve the request's worst case, or raise the refusal."""
        try:
            answer = await self.usage.reserve(principal.name, model, len(body), max_tokens)
        except RedisError as exc:  # no budget check, no request: fail closed
            log.error("LLM budget reservation failed: %r", exc)
            raise ProxyError("the gateway cannot check budgets right now (Redis); try again", 503) from None
        if not isinstance(answer, Reservation):
            await self.refuse(answer)
        self.live[answer.id] = answer
        return answer

    async def check(self, principal: Principal) -> None:
        """An unbilled call (``count_tokens``): refused like a Messages request while a hold stops the
        agent or one of its budgets is used up; nothing is reserved."""
        try:
            answer = await self.usage.check(principal.name)
        except RedisError as exc:  # fail closed, as reserving does
            log.error("LLM budget check failed: %r", exc)
            raise ProxyError("the gateway cannot check budgets right now (Redis); try again", 503) from None
        if answer is not None:
            await self.refuse(answer)

    async def refuse(self, answer: BudgetRefusal | Hold) -> NoReturn:
        self.metrics.budget_refusals.labels(scope=answer.scope).inc()
        if isinstance(answer, BudgetRefusal):
            await self.post_notices(answer.notices)
        raise BudgetRefused(answer.message(), scope=answer.scope, budget=answer.budget)

    def settle_soon(self, res: Reservation, model: str | None, usage: Usage | None) -> None:
        """Settle ``res`` in a task of its own, off the answer's path. The books stay read-your-writes:
        the agent's next request and every reader of its usage wait for it (``UsageStore.settled``),
        and shutdown drains it. Until it runs the reservation's worst case still counts against every
        budget (docs/llm-proxy.md, "Response", says what other agents see meanwhile)."""
        self.usage.track(res.name, asyncio.create_task(self.settle(res, model, usage), name="llm-settle"))

    async def settle(self, res: Reservation, model: str | None, usage: Usage | None) -> None:
        """Replace the reservation by ``usage`` (None: release it); a failure is logged, never raised
        (the reservation then expires on its own). Runs as a task of its own (``settle_soon``)."""
        self.live.pop(res.id, None)
        try:
            hold = await self.usage.settle(res, model, usage)
        except Exception as exc:  # the reservation expires on its own; the usage is lost
            log.error("could not settle the LLM usage of %s: %r", res.name, exc)
            return
        if hold is not None:  # booked beyond its reservation: the agent is stopped until cleared
            log.error("LLM books: %s booked more than it reserved: %s", res.name, hold.describe())
            if hold.new:
                await self.post_notices([hold.notice()])
        if usage is not None:
            for f, n in zip(TOKEN_FIELDS, (getattr(usage, f) for f in TOKEN_FIELDS), strict=True):
                if n:
                    self.metrics.tokens.labels(agent=res.name, type=TOKEN_TYPES[f]).inc(n)
            price = self.settings.price_for(model or res.model)
            self.metrics.cost.labels(agent=res.name).inc(
                price.cost(*(getattr(usage, f) for f in TOKEN_FIELDS))
            )

    # -- upstream ----------------------------------------------------------------------------

    async def send(self, request: Request, path: str, body: bytes) -> UpstreamResponse:
        """The upstream's answer (headers read, body not yet) to ``path`` (with its query string),
        retrying what is worth retrying."""
        headers = self.upstream_headers(request)
        attempt = 0
        while True:
            try:
                response = await self.upstream.post(path, headers, body)
            except UpstreamFailed as exc:
                if exc.timeout:
                    raise ProxyError(f"upstream timed out: {exc.reason}", 504) from None
                if not exc.retry:
                    raise ProxyError(f"upstream error: {exc.reason}", 502) from None
                if attempt >= self.settings.max_retries:
                    raise ProxyError(f"upstream unreachable: {exc.reason}", 502) from None
                reason, delay = "connection", self.backoff(attempt)
            else:
                retryable = response.status_code in RETRY_STATUSES
                if not retryable or attempt >= self.settings.max_retries:
                    return response
                if response.headers.get("x-should-retry") == "false":
                    return response
                reason = str(response.status_code)
                hinted = parse_retry_after(response.headers)
                delay = self.backoff(attempt) if hinted is None else hinted
                response.close()
            self.metrics.retries.labels(reason=reason).inc()
            attempt += 1
            await asyncio.sleep(min(delay, self.settings.retry_after_max))

    async def forward(self, request: Request, billed: bool) -> Response:
        """Every upstream route: a slot, the agent's books (``billed``: reserve and settle the request's
        cost; else only check that no budget is used up and no hold stops it), then the upstream."""
        started = time.perf_counter()
        res: Reservation | None = None
        try:
            principal = await self.authenticate(request)
            path = request.url.path + forwarded_query(request.url.query)
            body = await request.body()
            bounds = self.bounds(body) if billed else None
            # The agent's answers already given are booked before it queues for a slot: waiting for them
            # while holding one would keep other agents' requests from the upstream.
            await self.usage.books_settled(principal.name)
            slot = Slot(self)
            try:
                await slot.acquire()
                # Reserved once a slot is held: only requests going upstream hold budget, so a flood
                # of queued requests cannot reserve the swarm's budget away from everyone else.
                if bounds is not None:
                    res = await self.reserve(principal, body, *bounds)
                else:
                    await self.check(principal)
                upstream = await self.send(request, path, body)
            except BaseException:
                slot.release()
                raise
        except GatewayError as exc:
            # Answered here, not by the app's handler: the reservation is settled and the answer counted
            # first, and the upstream key is scrubbed from the message.
            if res is not None:
                self.settle_soon(res, None, None)
            path = request.url.path
            return self.answer(error_response(path, exc, self.scrub_text(exc.message)))
        except BaseException:
            if res is not None:
                self.settle_soon(res, None, None)
            raise
        self.metrics.seconds.observe(time.perf_counter() - started)
        try:
            headers = self.response_headers(upstream)
            if upstream.headers.get("content-type", "").startswith("text/event-stream"):
                headers.setdefault("cache-control", "no-cache")
                stream = ProxyStream(self, upstream, slot, principal, res, headers)
                self.metrics.requests.labels(status=str(upstream.status_code)).inc()
                return stream
        except BaseException:  # the slot and the connection go back, whatever an upstream's headers did
            upstream.close()
            slot.release()
            if res is not None:  # as a client that left before the first event: the input
                self.settle_soon(res, None, res.billable(None, output_floor=0))
            raise
        spent: Usage | None = None
        model: str | None = None
        try:
            data = await upstream.read()
            if res is not None and upstream.status_code == 200:
                model, spent = self.usage_of(data, res)
        except UpstreamBroke as exc:
            broke = ProxyError(f"upstream broke: {exc}", 502)
            return self.answer(error_response(request.url.path, broke))
        finally:
            upstream.close()
            slot.release()
            if res is not None:
                self.settle_soon(res, model, spent)
        response = Response(KeyScrubber(self.secret).scrub(data), upstream.status_code, headers)
        return self.answer(response)

    def answer(self, response: Response) -> Response:
        self.metrics.requests.labels(status=str(response.status_code)).inc()
        return response

    @staticmethod
    def usage_of(data: bytes, res: Reservation) -> tuple[str | None, Usage]:
        """The model and usage to book for a 200 JSON answer; unreported counts book their worst case."""
        try:
            message = json.loads(data)
        except ValueError:
            message = None
        usage, model = Usage(), None
        if isinstance(message, dict):
            usage.merge(message.get("usage"))
            model = message.get("model") if isinstance(message.get("model"), str) else None
        return model, res.billable(usage)
