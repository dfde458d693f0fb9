"""Shell completion of the CLI's arguments (typer ``autocompletion`` callbacks; ``kswarm
--install-completion`` installs them): agent names, pool names, PR numbers and job ids.

Agent names come from the home's swarm first (``swarm/swarm.json``: no network), then the gateway;
pools, PRs and jobs from the gateway, asked with a short timeout. A completion never prints an error
or waits long: whatever fails yields no candidates.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import typer

from gateway.client import GatewayClient, find_gateway, kswarm_home

TIMEOUT_S = 1.0


def _home(ctx: typer.Context | None) -> Path | None:
    value = ctx.params.get("home") if ctx is not None else None
    return Path(value) if value else None


def _ask(ctx: typer.Context | None, path: str, **params: Any) -> Any:
    try:
        target = dataclasses.replace(find_gateway(_home(ctx)), timeout=TIMEOUT_S)
        with GatewayClient(target) as gateway:
            return gateway.get(path, **params)
    except Exception:  # a completion never fails loudly
        return None


def _matching(candidates: list[str], incomplete: str) -> list[str]:
    return sorted({c for c in candidates if c.startswith(incomplete)})


def agent_names(ctx: typer.Context, incomplete: str) -> list[str]:
    from orchestrator.supervisor.operations import SwarmInfo
    from orchestrator.swarm_dir.provision import SwarmLayout

    info = SwarmInfo.load(SwarmLayout(kswarm_home(_home(ctx))))
    names = list(info.agents) if info is not None else []
    if not names:
        names = [a.get("name", "") for a in _ask(ctx, "/api/agents") or []]
    return _matching(names, incomplete)


def pool_names(ctx: typer.Context, incomplete: str) -> list[str]:
    return _matching([p.get("pool", "") for p in _ask(ctx, "/api/jobs/pools") or []], incomplete)


def pr_numbers(ctx: typer.Context, incomplete: str) -> list[str]:
    pulls = _ask(ctx, "/api/forge/pulls", state="open") or []
    return _matching([str(p.get("number", "")) for p in pulls if isinstance(p, dict)], incomplete)


def job_ids(ctx: typer.Context, incomplete: str) -> list[str]:
    jobs = _ask(ctx, "/api/jobs", limit=100) or []
    return _matching([j.get("id", "") for j in jobs if isinstance(j, dict)], incomplete)
