"""The LLM proxy's read/admin surface: ``/api/usage``, the ``llm_usage`` MCP tool, Prometheus metrics."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway.deps import AnyPrincipal, OperatorOnly, provided
from gateway.errors import Forbidden
from gateway.llm.usage import UsageStore
from gateway.llm.usage_models import AgentUsage, BudgetUpdate, UsageReport
from gateway.plugin import McpTools
from gateway.principals import PrincipalKind
from gateway.services import LLM_USAGE


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
        self.leases_granted = Counter(
            "kswarm_llm_budget_leases",
            "Budget leases granted to this gateway (gateway/llm/leases.py)",
            registry=registry,
        )
        self.lease_draws = Counter(
            "kswarm_llm_budget_lease_draws",
            "Requests admitted from a budget lease, without a Redis round trip",
            registry=registry,
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


Usage = Annotated[UsageStore, Depends(provided(LLM_USAGE))]
# ``/api/usage``: operators see every agent and the swarm totals, others only themselves.
usage_router = APIRouter(prefix="/api/usage", tags=["usage"])


@usage_router.get("", response_model=UsageReport, summary="LLM usage, cost estimates and budgets")
async def usage(store: Usage, principal: AnyPrincipal) -> UsageReport:
    if principal.kind == PrincipalKind.operator:
        return UsageReport(agents=await store.all(), swarm=await store.swarm())
    return UsageReport(agents={principal.name: await store.get(principal.name)})


@usage_router.get("/{name}", response_model=AgentUsage, summary="One agent's usage (operators or itself)")
async def one(name: str, store: Usage, principal: AnyPrincipal) -> AgentUsage:
    if principal.kind != PrincipalKind.operator and principal.name != name:
        raise Forbidden("you may only read your own usage")
    return await store.get(name)


@usage_router.post("/{name}/reset", response_model=AgentUsage, summary="Forget an agent's usage (operators)")
async def reset(name: str, store: Usage, _: OperatorOnly) -> AgentUsage:
    return await store.reset(name)


@usage_router.put(
    "/{name}/budget", response_model=AgentUsage, summary="Override an agent's budget (operators)"
)
async def budget(name: str, body: BudgetUpdate, store: Usage, _: OperatorOnly) -> AgentUsage:
    await store.set_budget(name, body)
    return await store.get(name)


def usage_tools(store: UsageStore) -> McpTools:
    """The ``llm_usage`` MCP tool: the caller's own usage, cost estimate and budget."""
    from gateway.mcp_server import caller  # late: keeps this module importable without the MCP stack

    tools = McpTools()

    @tools.tool(name="llm_usage", description="Your model token usage, estimated cost and budget.")
    async def llm_usage() -> dict[str, Any]:
        return (await store.get(caller().name)).model_dump()

    return tools
