"""The one agent table of the CLI: ``kswarm ps`` and ``kswarm agent list`` print the same columns, and
the same JSON rows, for the same object.

The state is the gateway's (``GET /api/agents/liveness``, computed by ``gateway/swarm/liveness.py``,
the same as Attention and the UI show): the CLI never derives one itself. Without a gateway, ``ps``
shows the orchestrator's records with the state ``unknown`` and says why.
"""

from __future__ import annotations

from typing import Any

import typer

from gateway.client import Missing
from gateway.client.http import GatewayClient
from orchestrator.cli.output import age, safe

NO_GATEWAY_STATE = "unknown"


def usage_by_agent(gateway: GatewayClient) -> dict[str, dict[str, Any]]:
    """Tokens and cost per agent from the gateway's LLM proxy ({} when it has none)."""
    try:
        return dict(gateway.get("/api/usage").get("agents", {}))
    except Missing:
        return {}


def liveness_rows(gateway: GatewayClient, names: set[str] | None = None) -> list[dict[str, Any]]:
    """One row per agent (only ``names`` when given), in name order, as the gateway computed it."""
    report = gateway.get("/api/agents/liveness")
    usage = usage_by_agent(gateway)
    rows = []
    for agent in report["agents"]:
        if names is not None and agent["name"] not in names:
            continue
        spent = usage.get(agent["name"], {})
        rows.append(
            {
                "agent": agent["name"],
                "state": agent["state"],
                "reason": agent["reason"],
                "backend": agent["backend"] or "-",
                "uptime_s": agent["uptime_s"],
                "restarts": agent["restarts"],
                "last_heartbeat_s": agent["heartbeat_age_s"],
                "last_error": agent["last_error"],
                "doing": agent["doing"],
                "email": agent["email"],
                "tokens": spent.get("total_tokens", 0),
                "cost_usd": spent.get("cost_usd", 0.0),
            }
        )
    return rows


# States whose reason is printed below the table: the ones an operator acts on.
EXPLAINED = ("stalled", "crash-looping", "quarantined", "stopped", NO_GATEWAY_STATE)


def print_agent_table(rows: list[dict[str, Any]]) -> None:
    typer.echo(
        f"{'AGENT':<20} {'BACKEND':<8} {'STATE':<14} {'UPTIME':>8} {'RESTARTS':>8} {'HEARTBEAT':>10}"
        f" {'TOKENS':>9} {'COST':>8}  DOING"
    )
    for r in rows:
        beat = age(r["last_heartbeat_s"]) + (" ago" if r["last_heartbeat_s"] is not None else "")
        restarts = "-" if r["restarts"] is None else r["restarts"]
        doing = safe(r.get("doing") or "", markup=False)  # the agent's words, every character visible
        typer.echo(
            f"{safe(r['agent'], markup=False):<20} {r['backend']:<8} {r['state']:<14} "
            f"{age(r['uptime_s']):>8} {restarts:>8} {beat:>10} {r['tokens']:>9} "
            f"{'$' + format(r['cost_usd'], '.4f'):>8}  {doing}"
        )
    for r in rows:  # why: the last error of a crash-looping agent, how long a stalled one is silent
        if r["state"] in EXPLAINED and r.get("reason"):
            typer.echo(f"{r['agent']}: {r['state']}: {safe(r['reason'], markup=False)}")
