"""Two gate instances (as with two gateway replicas) racing to merge two PRs into the same base."""

from __future__ import annotations

import asyncio
from pathlib import Path

from forgekit import ForgeGateway, Git
from redis.asyncio import Redis

from gateway.config import GatewaySettings
from gateway.context import GatewayContext
from gateway.forge.embedded.forge import EmbeddedForge
from gateway.forge.gate.gate import ReviewGate
from gateway.forge.gate.ledger import EvidenceLedger
from gateway.forge.gate.policy import ReviewPolicy


async def test_racing_gates_merge_each_pr_once_and_keep_main_linear(
    quiet_gw: ForgeGateway, short_tmp: Path
) -> None:
    redis = Redis.from_url(quiet_gw.redis_url, decode_responses=True)
    settings = GatewaySettings(redis_url=quiet_gw.redis_url, home=quiet_gw.home, swarm=quiet_gw.swarm)
    ctx = GatewayContext.build(settings, redis)
    forge = EmbeddedForge(redis, quiet_gw.home / "forge", ctx.principals, quiet_gw.swarm, quiet_gw.url)
    info = await forge.ensure_repo("proto", "race")
    await forge.protect_branch("proto", "race", "main", ReviewPolicy(required_approvals=1))
    numbers, heads = [], []
    for who, path in (("alice", "r1.py"), ("bob", "r2.py")):
        git = Git(short_tmp / f"h-{who}", quiet_gw.tokens[who], who, f"{who}@agents.{quiet_gw.swarm}")
        work = git.clone(info.clone_url, short_tmp / f"w-{who}")
        git.run("checkout", "-q", "-b", f"{who}/race", cwd=work)
        heads.append(git.commit(work, path, f"{who}\n", path))
        assert git.push(work, f"{who}/race").returncode == 0
        pr = await forge.open_pr(who, "proto", "race", f"{who}/race", "main", path)
        await forge.review("carol", "proto", "race", pr.number, "APPROVED")
        numbers.append(pr.number)

    ledger = EvidenceLedger(redis)
    gates = [ReviewGate(forge, redis, ctx.chat, ctx.principals, ledger) for _ in range(2)]
    await asyncio.gather(*(g.consider("proto", "race", n) for g in gates for n in numbers))

    for number in numbers:
        pr = await forge.get_pr("proto", "race", number)
        assert pr.merged
        merges = [e for e in await gates[0].audit("proto/race", number) if e["action"] == "merged"]
        assert len(merges) == 1, merges
    bare = forge.bare("proto", "race")
    first_parent = (await bare.git("log", "--first-parent", "--format=%H %P", "main")).splitlines()
    assert len(first_parent) == 3 and all(len(line.split()) == 3 for line in first_parent[:2])
    for head in heads:
        assert await bare.merge_base(head, "main") == head
    await redis.aclose()
