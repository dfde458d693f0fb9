"""LLM usage accounting per agent in Redis, budgets, and the proxy's Prometheus metrics.

Layout (all under ``ks:llm:``): one hash per agent with its token counters, request count and cost
in nano-USD (integers, so increments are exact), one hash with the swarm totals, a set of the
agents that have used the proxy, an optional budget override hash per agent, and one flag per
exhausted budget that makes the ``#ops`` notice fire once per crossing (it is cleared when the
budget is no longer exhausted: usage reset or budget raised).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from pydantic import BaseModel, Field
from redis.asyncio import Redis

from gateway.auth import current_principal, require_operator
from gateway.keys import PREFIX
from gateway.llm_config import LLMProxySettings
from gateway.principals import Principal, PrincipalKind

if TYPE_CHECKING:
    from gateway.context import GatewayContext

NANO = 1_000_000_000
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
TOKEN_TYPES = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_creation_input_tokens": "cache_write",
    "cache_read_input_tokens": "cache_read",
}
USAGE_AGENTS = f"{PREFIX}llm:usage-agents"
USAGE_SWARM = f"{PREFIX}llm:usage-swarm"
SWARM_EXHAUSTED = f"{PREFIX}llm:exhausted-swarm"


def usage_key(name: str) -> str:
    return f"{PREFIX}llm:usage:{name}"


def budget_key(name: str) -> str:
    return f"{PREFIX}llm:budget:{name}"


def exhausted_key(name: str) -> str:
    return f"{PREFIX}llm:exhausted:{name}"


@dataclass
class Usage:
    """The token usage of one response (Anthropic's ``usage`` object, cache fields included)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def merge(self, usage: Any) -> None:
        """Take every known counter present in ``usage`` (later events carry cumulative values)."""
        if not isinstance(usage, dict):
            return
        for f in fields(self):
            value = usage.get(f.name)
            if isinstance(value, int) and value >= 0:
                setattr(self, f.name, value)

    @property
    def total(self) -> int:
        return sum(getattr(self, f) for f in TOKEN_FIELDS)


class AgentUsage(BaseModel):
    """Accumulated usage and estimated cost of one agent (or of the whole swarm)."""

    name: str = Field(description="Agent name, or 'swarm' for the totals.")
    requests: int = Field(0, description="Successful /v1/messages requests recorded.")
    input_tokens: int = Field(0, description="Uncached input tokens.")
    output_tokens: int = Field(0, description="Output tokens.")
    cache_creation_input_tokens: int = Field(0, description="Input tokens written to the prompt cache.")
    cache_read_input_tokens: int = Field(0, description="Input tokens read from the prompt cache.")
    total_tokens: int = Field(0, description="Sum of the four token counters.")
    cost_usd: float = Field(0.0, description="Estimated cost from the configured price table.")
    budget_usd: float | None = Field(None, description="Spending budget; None = unlimited.")
    budget_tokens: int | None = Field(None, description="Token budget; None = unlimited.")
    exhausted: bool = Field(False, description="True when a budget is used up: requests are refused.")
    last_request: float | None = Field(None, description="Unix time of the last recorded request.")


class UsageReport(BaseModel):
    agents: dict[str, AgentUsage] = Field(description="Usage per agent (only the caller's own for agents).")
    swarm: AgentUsage | None = Field(None, description="Swarm totals (operators only).")


@dataclass
class Exhausted:
    """A refused request: which budget is used up, and whether this call claimed the #ops notice."""

    scope: Literal["agent", "swarm"]
    name: str
    usage: AgentUsage
    notices: list[str] = field(default_factory=list)  # #ops notices this caller must post

    def message(self) -> str:
        who = f"agent {self.name}" if self.scope == "agent" else "the swarm"
        u = self.usage
        parts = []
        if u.budget_usd is not None:
            parts.append(f"${u.cost_usd:.4f} of ${u.budget_usd:.4f}")
        if u.budget_tokens is not None:
            parts.append(f"{u.total_tokens} of {u.budget_tokens} tokens")
        return (
            f"LLM budget exhausted: {who} has used {' and '.join(parts)}. Model requests are refused "
            "until an operator raises the budget or resets the usage; retrying will not help."
        )


class UsageMetrics:
    """The proxy's Prometheus metrics, registered in the app's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.tokens = Counter(
            "kswarm_llm_tokens", "Tokens used through the proxy", ["agent", "type"], registry=registry
        )
        self.cost = Counter("kswarm_llm_cost_usd", "Estimated spend (USD)", ["agent"], registry=registry)
        self.requests = Counter(
            "kswarm_llm_proxy_requests", "Proxy answers by HTTP status", ["status"], registry=registry
        )
        self.retries = Counter(
            "kswarm_llm_upstream_retries",
            "Upstream attempts retried, by cause",
            ["reason"],
            registry=registry,
        )
        self.budget_refusals = Counter(
            "kswarm_llm_budget_refusals", "Requests refused for budget", ["scope"], registry=registry
        )
        self.queued = Gauge(
            "kswarm_llm_queued_requests", "Requests waiting for a concurrency slot", registry=registry
        )
        self.in_flight = Gauge("kswarm_llm_in_flight_requests", "Requests holding a slot", registry=registry)
        self.seconds = Histogram(
            "kswarm_llm_proxy_seconds",
            "Time from request to upstream response headers (queueing and retries included)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=registry,
        )


# Add one response's usage to an agent and the swarm, and return the state a budget check needs,
# in one round trip. KEYS: agent usage, swarm usage, agents set, budget override, agent flag, swarm
# flag. ARGV: name, now, cost in nano-USD, then the four token counts in TOKEN_FIELDS order.
_RECORD_SCRIPT = """
local fields = {'input_tokens', 'output_tokens', 'cache_creation_input_tokens', 'cache_read_input_tokens'}
for k = 1, 2 do
  for i = 1, 4 do redis.call('HINCRBY', KEYS[k], fields[i], ARGV[3 + i]) end
  redis.call('HINCRBY', KEYS[k], 'cost_nusd', ARGV[3])
  redis.call('HINCRBY', KEYS[k], 'requests', 1)
  redis.call('HSET', KEYS[k], 'last_request', ARGV[2])
end
redis.call('SADD', KEYS[3], ARGV[1])
return {redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2]),
        redis.call('HMGET', KEYS[4], 'usd', 'tokens'), redis.call('EXISTS', KEYS[5]),
        redis.call('EXISTS', KEYS[6])}
"""


def _pairs(flat: list[str]) -> dict[str, str]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _int(value: str | None) -> int:
    return int(value) if value else 0


def _opt_float(value: str | None) -> float | None:
    return float(value) if value not in (None, "") else None


def _opt_int(value: str | None) -> int | None:
    return int(value) if value not in (None, "") else None


class UsageStore:
    """Usage counters, budgets and budget flags in Redis."""

    def __init__(self, redis: Redis, settings: LLMProxySettings, metrics: UsageMetrics | None = None) -> None:
        self.redis = redis
        self.settings = settings
        self.metrics = metrics
        self._record_script = redis.register_script(_RECORD_SCRIPT)

    # -- recording ---------------------------------------------------------------------------

    async def record(self, name: str, model: str | None, usage: Usage) -> Exhausted | None:
        """Add one response's usage to ``name`` and the swarm (one atomic script); like ``check``,
        returns the budget this used up, if any, with the #ops notices of a fresh crossing."""
        price = self.settings.price_for(model)
        counts = [getattr(usage, f) for f in TOKEN_FIELDS]
        cost = price.cost(*counts)
        keys = [usage_key(name), USAGE_SWARM, USAGE_AGENTS, *self._state_keys(name)[2:]]
        args = [name, repr(time.time()), round(cost * NANO), *counts]
        agent_flat, swarm_flat, *state = await self._record_script(keys=keys, args=args)
        state = [_pairs(agent_flat), _pairs(swarm_flat), *state]
        if self.metrics is not None:
            for f, n in zip(TOKEN_FIELDS, counts, strict=True):
                if n:
                    self.metrics.tokens.labels(agent=name, type=TOKEN_TYPES[f]).inc(n)
            self.metrics.cost.labels(agent=name).inc(cost)
        return await self._verdict(name, *state, refusing=False)

    # -- budgets -----------------------------------------------------------------------------

    async def set_budget(self, name: str, usd: float | None, tokens: int | None) -> None:
        """Override ``name``'s budget in Redis (None clears that part of the override)."""
        key = budget_key(name)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            mapping = {k: str(v) for k, v in (("usd", usd), ("tokens", tokens)) if v is not None}
            if mapping:
                pipe.hset(key, mapping=mapping)
            await pipe.execute()

    def _agent_budget(self, name: str, override: list[str | None]) -> tuple[float | None, int | None]:
        usd = _opt_float(override[0])
        if usd is None:
            usd = self.settings.agent_budgets_usd.get(name, self.settings.agent_budget_usd)
        tokens = _opt_int(override[1])
        if tokens is None:
            tokens = self.settings.agent_budget_tokens
        return usd, tokens

    @staticmethod
    def _build(
        name: str, raw: dict[str, str], budget_usd: float | None, budget_tokens: int | None
    ) -> AgentUsage:
        counts = {f: _int(raw.get(f)) for f in TOKEN_FIELDS}
        total = sum(counts.values())
        cost = _int(raw.get("cost_nusd")) / NANO
        exhausted = (budget_usd is not None and cost >= budget_usd) or (
            budget_tokens is not None and total >= budget_tokens
        )
        return AgentUsage(
            name=name,
            requests=_int(raw.get("requests")),
            total_tokens=total,
            cost_usd=cost,
            budget_usd=budget_usd,
            budget_tokens=budget_tokens,
            exhausted=exhausted,
            last_request=_opt_float(raw.get("last_request")),
            **counts,
        )

    @staticmethod
    def _state_keys(name: str) -> list[str]:
        return [usage_key(name), USAGE_SWARM, budget_key(name), exhausted_key(name), SWARM_EXHAUSTED]

    def _queue_state(self, pipe: Any, name: str) -> None:
        usage, swarm, budget, flag, swarm_flag = self._state_keys(name)
        pipe.hgetall(usage)
        pipe.hgetall(swarm)
        pipe.hmget(budget, ["usd", "tokens"])
        pipe.exists(flag)
        pipe.exists(swarm_flag)

    async def check(self, name: str) -> Exhausted | None:
        """None when ``name`` may spend; else which budget is used up (agent first, then swarm).

        Each newly exhausted budget is flagged in Redis so that exactly one caller gets it in
        ``notices`` (the #ops notice fires once per crossing); a flag whose budget is no longer
        exhausted is cleared, re-arming its notice. One Redis round trip in the common case.
        """
        async with self.redis.pipeline(transaction=False) as pipe:
            self._queue_state(pipe, name)
            state = await pipe.execute()
        return await self._verdict(name, *state, refusing=True)

    async def _verdict(
        self,
        name: str,
        agent_raw: dict[str, str],
        swarm_raw: dict[str, str],
        override: list[str | None],
        agent_flag: int,
        swarm_flag: int,
        refusing: bool,
    ) -> Exhausted | None:
        agent = self._build(name, agent_raw, *self._agent_budget(name, override))
        swarm = self._build(
            "swarm", swarm_raw, self.settings.swarm_budget_usd, self.settings.swarm_budget_tokens
        )
        scopes: list[tuple[Literal["agent", "swarm"], str, bool, AgentUsage]] = [
            ("agent", exhausted_key(name), bool(agent_flag), agent),
            ("swarm", SWARM_EXHAUSTED, bool(swarm_flag), swarm),
        ]
        stale = [key for _, key, flag, u in scopes if flag and not u.exhausted]
        if stale:
            await self.redis.delete(*stale)
        found: Exhausted | None = None
        for scope, key, flag, u in scopes:
            if not u.exhausted:
                continue
            verdict = Exhausted(scope=scope, name=name, usage=u)
            if not flag and await self.redis.set(key, repr(time.time()), nx=True):
                verdict.notices.append(verdict.message())
            if found is None:
                found = verdict
            else:
                found.notices.extend(verdict.notices)
        if found is not None and refusing and self.metrics is not None:
            self.metrics.budget_refusals.labels(scope=found.scope).inc()
        return found

    # -- reading -----------------------------------------------------------------------------

    async def get(self, name: str) -> AgentUsage:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(usage_key(name))
            pipe.hmget(budget_key(name), ["usd", "tokens"])
            raw, override = await pipe.execute()
        return self._build(name, raw, *self._agent_budget(name, override))

    async def all(self) -> dict[str, AgentUsage]:
        names = sorted(await self.redis.smembers(USAGE_AGENTS))
        return {n: await self.get(n) for n in names}

    async def swarm(self) -> AgentUsage:
        raw = await self.redis.hgetall(USAGE_SWARM)
        return self._build("swarm", raw, self.settings.swarm_budget_usd, self.settings.swarm_budget_tokens)

    async def reset(self, name: str) -> AgentUsage:
        """Forget ``name``'s usage (the swarm totals keep it) and re-arm its notice; returns what it was."""
        before = await self.get(name)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(usage_key(name), exhausted_key(name))
            pipe.srem(USAGE_AGENTS, name)
            await pipe.execute()
        return before


Caller = Annotated[Principal, Depends(current_principal)]
Operator = Annotated[Principal, Depends(require_operator)]


class BudgetUpdate(BaseModel):
    usd: float | None = Field(None, ge=0, description="USD budget; None falls back to the configured one.")
    tokens: int | None = Field(None, ge=0, description="Token budget; None falls back to the configured one.")


def build_usage_router(store: UsageStore) -> APIRouter:
    """``/api/usage``: operators see every agent and the swarm totals, others only themselves."""
    router = APIRouter(prefix="/api/usage", tags=["usage"])

    @router.get("", response_model=UsageReport, summary="LLM usage, cost estimates and budgets")
    async def usage(principal: Caller) -> UsageReport:
        if principal.kind == PrincipalKind.operator:
            return UsageReport(agents=await store.all(), swarm=await store.swarm())
        return UsageReport(agents={principal.name: await store.get(principal.name)})

    @router.get("/{name}", response_model=AgentUsage, summary="One agent's usage (operators or itself)")
    async def one(name: str, principal: Caller) -> AgentUsage:
        if principal.kind != PrincipalKind.operator and principal.name != name:
            raise HTTPException(status_code=403, detail="you may only read your own usage")
        return await store.get(name)

    @router.post("/{name}/reset", response_model=AgentUsage, summary="Forget an agent's usage (operators)")
    async def reset(name: str, _: Operator) -> AgentUsage:
        return await store.reset(name)

    @router.put("/{name}/budget", response_model=AgentUsage, summary="Override an agent's budget (operators)")
    async def budget(name: str, body: BudgetUpdate, _: Operator) -> AgentUsage:
        await store.set_budget(name, body.usd, body.tokens)
        return await store.get(name)

    return router


def register_usage_tool(mcp: Any, store: UsageStore) -> None:
    """The ``llm_usage`` MCP tool: the caller's own usage, cost estimate and budget."""
    from gateway.mcp_server import caller  # late: keeps this module importable without the MCP stack

    @mcp.tool(name="llm_usage", description="Your model token usage, estimated cost and budget.")
    async def llm_usage() -> dict[str, Any]:
        return (await store.get(caller().name)).model_dump()


async def usage_by_agent(ctx: GatewayContext) -> dict[str, AgentUsage]:
    """Usage of every agent principal and of anyone else who used the proxy (for ``kswarm ps``)."""
    store = ctx.extras.get("llm_usage")
    if not isinstance(store, UsageStore):
        store = UsageStore(ctx.redis, LLMProxySettings())
    found = await store.all()
    for agent in await ctx.principals.list(PrincipalKind.agent):
        if agent.name not in found:
            found[agent.name] = await store.get(agent.name)
    return dict(sorted(found.items()))
