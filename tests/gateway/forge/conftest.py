"""Fixtures for the forge suites.

A gateway process costs seconds to start, so one serves a whole test module (on a Redis flushed when
the module starts); each test gets its own repository, which isolates PRs, statuses and the gate.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from forgekit import ForgeGateway, Swarm, running_gateway
from redis.asyncio import Redis

from gateway.forge.embedded.forge import EmbeddedForge
from gateway.forge.gitea.forge import GiteaForge
from gateway.forge.protocol import Forge
from gateway.forge.settings import ForgeSettings
from gateway.principals import PrincipalStore


@pytest.fixture(scope="module")
def forge_gw(redis_url: str) -> Iterator[ForgeGateway]:
    """A gateway with the forge plugin and its gate on a Redis emptied for this module, plus
    principals alice, bob, carol (agents) and worker1."""
    with running_gateway(redis_url) as gw:
        yield gw


@pytest.fixture(scope="module")
def quiet_gw(redis_url: str) -> Iterator[ForgeGateway]:
    """Like ``forge_gw`` but without the gate bot, for tests that merge by hand."""
    with running_gateway(redis_url, ForgeSettings(gate_enabled=False)) as gw:
        yield gw


def repo_name(node: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", node.lower()).strip("-")[:60] or "repo"


@pytest.fixture
def swarm(forge_gw: ForgeGateway, short_tmp: Path, request: pytest.FixtureRequest) -> Swarm:
    """A fresh repo kswarm/<test name>, main protected (1 approval, check kswarm/verify:cpu)."""
    name = repo_name(request.node.name)
    with forge_gw.op() as op:
        reply = op.post("/api/forge/repos", json={"org": "kswarm", "name": name})
        assert reply.status_code == 201, reply.text
    s = Swarm(forge_gw, short_tmp, "kswarm", name, forge_gw.tokens)
    s.set_policy(required_approvals=1, required_checks=["kswarm/verify:cpu"])
    return s


@pytest.fixture(params=["embedded", "gitea"])
async def forge(  # the Forge protocol suite's two implementations
    request: pytest.FixtureRequest, quiet_gw: ForgeGateway
) -> AsyncIterator[Forge]:
    redis = Redis.from_url(quiet_gw.redis_url, decode_responses=True)
    if request.param == "gitea":
        impl: Forge = GiteaForge(
            quiet_gw.url, quiet_gw.operator_token, redis=redis, gate_email=f"gate@bots.{quiet_gw.swarm}"
        )
    else:
        impl = EmbeddedForge(
            redis,
            quiet_gw.home / "forge",
            PrincipalStore(redis, quiet_gw.swarm),
            quiet_gw.swarm,
            quiet_gw.url,
        )
    yield impl
    await impl.aclose()
    await redis.aclose()
