"""An agent's inbox is delivered at least once and handled at most once (issue 23): the gateway's
cursor moves only when the agent acknowledges what a wake handled, and the runtime remembers the last
item it handled, so an agent frozen or killed at any point of its handling loop loses no DM and
handles none twice. Each "kill" below is a fresh ``Inbox`` on the same history dir, as a restarted
agent gets."""

from __future__ import annotations

from pathlib import Path

from agents.config import AgentConfig
from agents.session import Inbox, gateway_client
from kstest.gateway import GatewayThread


def config_for(gateway: GatewayThread, token: str, home: Path) -> AgentConfig:
    for sub in ("memory", "work", "history"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    return AgentConfig(
        name="bob", gateway_url=gateway.url, token=token, swarm="test", inbox_wait_s=1.0,
        memory_dir=home / "memory", work_dir=home / "work", history_dir=home / "history",
    )  # fmt: skip


def dm(gateway: GatewayThread, token: str, text: str) -> str:
    with gateway.client(token) as alice:
        reply = alice.post("/api/dms/bob/messages", json={"text": text})
    assert reply.status_code == 201, reply.text
    return str(reply.json()["id"])


async def test_no_dm_is_lost_or_handled_twice_whenever_the_agent_dies(
    gateway: GatewayThread, short_tmp: Path
) -> None:
    tokens = {n: gateway.add_principal(n) for n in ("alice", "bob")}
    config = config_for(gateway, tokens["bob"], short_tmp / "bob")
    dm(gateway, tokens["alice"], "first")

    async def fresh_inbox() -> tuple[Inbox, object]:
        client = gateway_client(config)
        return Inbox(client, config), client

    # killed after the fetch, before (or during) the wake: the DM comes again
    inbox, client = await fresh_inbox()
    assert [i["text"] for i in await inbox.next()] == ["first"]
    await client.aclose()  # type: ignore[attr-defined]
    inbox, client = await fresh_inbox()
    items = await inbox.next()
    assert [i["text"] for i in items] == ["first"], "a DM fetched by an agent that died is not lost"
    # killed after the wake wrote down what it handled, before the acknowledgement: not handled twice
    inbox.path.write_text(str(items[-1]["id"]) + "\n")
    await client.aclose()  # type: ignore[attr-defined]
    dm(gateway, tokens["alice"], "second")
    inbox, client = await fresh_inbox()
    items = await inbox.next()
    assert [i["text"] for i in items] == ["second"], "the handled DM is skipped, the new one comes"
    # a normal round: handled and acknowledged, the gateway's cursor has moved past both
    await inbox.handled(items)
    await client.aclose()  # type: ignore[attr-defined]
    assert inbox.path.read_text().strip() == items[-1]["id"]
    with gateway.client(tokens["bob"]) as bob:
        assert bob.get("/api/inbox", params={"peek": True}).json()["items"] == []
