"""Chat over REST: channels, DMs, threads, mentions, inbox, paging, limits, attribution."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import redis as redis_sync

from gateway import keys
from kstest.gateway import GatewayClients as GatewayProcess
from kstest.gateway import GatewayThread


@pytest.fixture
def agents(gateway: GatewayProcess) -> dict[str, str]:
    return {name: gateway.add_principal(name) for name in ("alice", "bob", "carol")}


def test_general_exists_from_the_start(gateway: GatewayProcess) -> None:
    with gateway.client(gateway.operator_token) as op:
        names = [c["name"] for c in op.get("/api/channels").json()]
    assert {"general", "ops", "reviews"} <= set(names)


def test_sender_comes_from_the_token_not_the_body(gateway: GatewayProcess, agents: dict[str, str]) -> None:
    with gateway.client(agents["alice"]) as alice:
        reply = alice.post("/api/channels/general/messages", json={"text": "I am bob", "sender": "bob"})
        assert reply.status_code == 201
        assert reply.json()["sender"] == "alice"
        reply = alice.post("/api/dms/carol/messages", json={"text": "hi", "sender": "bob", "from": "bob"})
        assert reply.json()["sender"] == "alice"
    with gateway.client(agents["carol"]) as carol:
        items = carol.get("/api/inbox").json()["items"]
    assert [(i["sender"], i["reason"]) for i in items] == [("alice", "dm")]


def test_channel_lifecycle(gateway: GatewayProcess, agents: dict[str, str]) -> None:
    with gateway.client(agents["alice"]) as alice, gateway.client(agents["bob"]) as bob:
        created = alice.post("/api/channels", json={"name": "kernels", "topic": "triton"})
        assert created.status_code == 201 and created.json()["members"] == ["alice"]
        assert alice.post("/api/channels", json={"name": "kernels"}).status_code == 409
        assert alice.post("/api/channels", json={"name": "Bad Name!"}).status_code == 400
        assert bob.post("/api/channels/kernels/join").status_code == 200
        listed = {c["name"]: c for c in bob.get("/api/channels").json()}
        assert listed["kernels"]["members"] == ["alice", "bob"] and listed["kernels"]["topic"] == "triton"
        assert bob.put("/api/channels/kernels/topic", json={"topic": "softmax"}).json()["topic"] == "softmax"
        assert bob.post("/api/channels/kernels/leave").status_code == 200
        listed = {c["name"]: c for c in bob.get("/api/channels").json()}
        assert listed["kernels"]["members"] == ["alice"]
        assert bob.post("/api/channels/nope/join").status_code == 404


def test_a_post_into_a_channel_gone_since_the_gateway_read_it_writes_nothing(
    gateway: GatewayProcess, agents: dict[str, str], clean_redis: str
) -> None:
    """A plain post into a channel the gateway has read skips the read before its script, and the
    script checks the channel is still there: gone (a Redis restored without it, a hand-made clean-up),
    the post is a 404 and writes nothing, not the message, not its event; the next one is read again."""
    client = redis_sync.Redis.from_url(clean_redis, decode_responses=True)
    with gateway.client(agents["alice"]) as alice:
        assert alice.post("/api/channels", json={"name": "vanishing"}).status_code == 201
        assert alice.post("/api/channels/vanishing/messages", json={"text": "first"}).status_code == 201
        assert alice.post("/api/channels/vanishing/messages", json={"text": "known"}).status_code == 201
        client.hdel(keys.CHANNELS, "vanishing")
        stream, events = client.xlen(keys.channel_stream("vanishing")), client.xlen(keys.EVENTS)
        for text in ("into nothing", "again"):
            reply = alice.post("/api/channels/vanishing/messages", json={"text": text})
            assert reply.status_code == 404 and "no channel" in reply.text, reply.text
    assert (client.xlen(keys.channel_stream("vanishing")), client.xlen(keys.EVENTS)) == (stream, events)
    client.close()


def test_a_mention_checked_by_the_post_script_refuses_an_unknown_name_and_writes_nothing(
    gateway: GatewayProcess, agents: dict[str, str], clean_redis: str
) -> None:
    """A post with @names into a channel the gateway has read skips the read before its script, and the
    script checks every name is a principal: one that is not (never was, or removed since the gateway
    last looked) is a 400 naming it, and nothing is written: not the message, not its event, no inbox
    for the unknown name, not even the known one's."""
    client = redis_sync.Redis.from_url(clean_redis, decode_responses=True)
    with gateway.client(agents["alice"]) as alice:
        assert alice.post("/api/channels", json={"name": "roster"}).status_code == 201
        assert alice.post("/api/channels/roster/messages", json={"text": "read once"}).status_code == 201
        assert alice.post("/api/channels/roster/messages", json={"text": "hi @bob"}).status_code == 201
        client.sadd(keys.PRINCIPALS, "ghost")  # known to the principals set, then gone
        assert alice.post("/api/channels/roster/messages", json={"text": "@ghost hi"}).status_code == 201
        client.srem(keys.PRINCIPALS, "ghost")
        stream, events = client.xlen(keys.channel_stream("roster")), client.xlen(keys.EVENTS)
        inboxes = {n: client.xlen(keys.inbox(n)) for n in ("bob", "ghost", "zed")}
        reply = alice.post("/api/channels/roster/messages", json={"text": "@bob @ghost and @zed, look"})
        assert reply.status_code == 400, reply.text
        assert "@ghost" in reply.text and "@zed" in reply.text and "@bob" not in reply.text
    assert (client.xlen(keys.channel_stream("roster")), client.xlen(keys.EVENTS)) == (stream, events)
    assert {n: client.xlen(keys.inbox(n)) for n in inboxes} == inboxes
    client.close()


def test_mentions_validated_and_delivered(gateway: GatewayProcess, agents: dict[str, str]) -> None:
    with gateway.client(agents["alice"]) as alice:
        bad = alice.post("/api/channels/general/messages", json={"text": "hey @bob and @zed and @yan"})
        assert bad.status_code == 400
        assert "@zed" in bad.json()["detail"] and "@yan" in bad.json()["detail"]
        ok = alice.post("/api/channels/general/messages", json={"text": "hey @bob, mail me at x@bob.com"})
        assert ok.json()["mentions"] == ["bob"], "an e-mail address is not a mention"
    with gateway.client(agents["bob"]) as bob:
        items = bob.get("/api/inbox").json()["items"]
        assert [(i["reason"], i["sender"]) for i in items] == [("mention", "alice")]
        assert bob.get("/api/inbox").json()["items"] == [], "the cursor advanced"
    with gateway.client(agents["carol"]) as carol:
        assert carol.get("/api/inbox").json()["items"] == []


def test_at_all_notifies_channel_members(gateway: GatewayProcess, agents: dict[str, str]) -> None:
    with gateway.client(agents["bob"]) as bob, gateway.client(agents["carol"]) as carol:
        bob.post("/api/channels/general/join")
        carol.post("/api/channels/general/join")
    with gateway.client(agents["alice"]) as alice:
        assert alice.post("/api/channels/general/messages", json={"text": "standup @all"}).status_code == 201
        assert alice.get("/api/inbox").json()["items"] == [], "the sender is not notified"
    for name in ("bob", "carol"):
        with gateway.client(agents[name]) as c:
            assert [i["reason"] for i in c.get("/api/inbox").json()["items"]] == ["mention"]


def test_threads_and_reply_notifications(gateway: GatewayProcess, agents: dict[str, str]) -> None:
    with gateway.client(agents["alice"]) as alice, gateway.client(agents["bob"]) as bob:
        root = alice.post("/api/channels/general/messages", json={"text": "PR 1 ready"}).json()
        r1 = bob.post(
            "/api/channels/general/messages", json={"text": "looking", "reply_to": root["id"]}
        ).json()
        r2 = alice.post(
            "/api/channels/general/messages", json={"text": "thanks", "reply_to": r1["id"]}
        ).json()
        assert r1["thread"] == root["id"] and r2["thread"] == root["id"]
        thread = bob.get(f"/api/channels/general/threads/{root['id']}").json()["messages"]
        assert [m["text"] for m in thread] == ["PR 1 ready", "looking", "thanks"]
        assert [(i["reason"], i["sender"]) for i in alice.get("/api/inbox").json()["items"]] == [
            ("reply", "bob")
        ]
        assert [(i["reason"], i["sender"]) for i in bob.get("/api/inbox").json()["items"]] == [
            ("reply", "alice")
        ]
        missing = bob.post("/api/channels/general/messages", json={"text": "x", "reply_to": "1-0"})
        assert missing.status_code == 404
        assert (
            bob.post("/api/channels/general/messages", json={"text": "x", "reply_to": "nope"}).status_code
            == 400
        )


def test_dm_privacy_over_rest(gateway: GatewayProcess, agents: dict[str, str]) -> None:
    with gateway.client(agents["alice"]) as alice:
        dm = alice.post("/api/dms/bob/messages", json={"text": "the secret is 42"}).json()
    channel = dm["channel"]
    assert channel == "dm:alice:bob"
    with gateway.client(agents["bob"]) as bob:
        assert (
            bob.get(f"/api/channels/{channel}/messages").json()["messages"][0]["text"] == "the secret is 42"
        )
    with gateway.client(agents["carol"]) as carol:
        assert carol.get(f"/api/channels/{channel}/messages").status_code == 404
        assert carol.get(f"/api/channels/{channel}/threads/{dm['id']}").status_code == 404
        assert carol.post(f"/api/channels/{channel}/messages", json={"text": "let me in"}).status_code == 404
        assert carol.post(f"/api/channels/{channel}/join").status_code == 404
        assert channel not in [c["name"] for c in carol.get("/api/channels").json()]
        assert carol.get("/api/search", params={"q": "secret"}).json()["messages"] == []
        assert carol.get("/api/inbox").json()["items"] == []
    with gateway.client(gateway.operator_token) as op:
        # Operators watch everything, DMs included (the monitoring UI shows them).
        assert op.get("/api/search", params={"q": "secret"}).json()["messages"][0]["channel"] == channel
    with gateway.client(agents["bob"]) as bob:
        assert bob.get("/api/search", params={"q": "SECRET"}).json()["messages"][0]["id"] == dm["id"]


def test_dm_errors(gateway: GatewayProcess, agents: dict[str, str]) -> None:
    with gateway.client(agents["alice"]) as alice:
        assert alice.post("/api/dms/alice/messages", json={"text": "me"}).status_code == 400
        assert alice.post("/api/dms/nobody/messages", json={"text": "hi"}).status_code == 404


def test_history_paging(gateway: GatewayProcess, agents: dict[str, str]) -> None:
    with gateway.client(gateway.operator_token) as op:
        ids = [op.post("/api/channels/ops/messages", json={"text": f"m{i}"}).json()["id"] for i in range(25)]
        latest = op.get("/api/channels/ops/messages", params={"limit": 10}).json()["messages"]
        assert [m["text"] for m in latest] == [f"m{i}" for i in range(15, 25)]
        older = op.get("/api/channels/ops/messages", params={"limit": 10, "before": latest[0]["id"]}).json()
        assert [m["text"] for m in older["messages"]] == [f"m{i}" for i in range(5, 15)]
        newer = op.get("/api/channels/ops/messages", params={"limit": 3, "after": ids[20]}).json()
        assert [m["text"] for m in newer["messages"]] == ["m21", "m22", "m23"]
        both = op.get("/api/channels/ops/messages", params={"before": ids[3], "after": ids[1]})
        assert both.status_code == 400
        assert op.get("/api/channels/ops/messages", params={"limit": 0}).status_code == 422
        assert op.get("/api/channels/ops/messages", params={"before": "x"}).status_code == 400


def test_message_size_limit(gateway: GatewayProcess, agents: dict[str, str]) -> None:
    with gateway.client(agents["alice"]) as alice:
        at_limit = alice.post("/api/channels/general/messages", json={"text": "a" * 16384})
        assert at_limit.status_code == 201
        over = alice.post("/api/channels/general/messages", json={"text": "é" * 8193})  # 16386 bytes
        assert over.status_code == 413 and "16384" in over.json()["detail"]
        assert alice.post("/api/channels/general/messages", json={"text": "  "}).status_code == 400


def test_attack_an_agent_cannot_create_channels_without_end(clean_redis: str, short_tmp: Path) -> None:
    """Every channel is a stream everyone's channel list and every search walks: mallory may create
    ``max_channels_per_agent``; the next is a 429 naming the limit, an existing name (409) costs her
    nothing, and the operator is not counted."""
    gw = GatewayThread(short_tmp / "home", clean_redis, max_channels_per_agent=3)
    gw.start()
    try:
        with gw.client(gw.add_principal("mallory")) as c:
            made = [c.post("/api/channels", json={"name": f"spam-{i}"}).status_code for i in range(3)]
            assert made == [201, 201, 201]
            assert c.post("/api/channels", json={"name": "spam-0"}).status_code == 409
            over = c.post("/api/channels", json={"name": "spam-3"})
            assert over.status_code == 429 and "max_channels_per_agent" in over.json()["detail"]
            topic = c.put("/api/channels/spam-0/topic", json={"topic": "t" * 501})
            assert topic.status_code == 422, "a topic is one line for a list, not a store"
            assert c.get("/api/search", params={"q": "x" * 201}).status_code == 422
        with gw.client(gw.operator_token) as op:
            assert op.post("/api/channels", json={"name": "ops-4"}).status_code == 201
            names = {ch["name"] for ch in op.get("/api/channels").json()}
        assert "spam-3" not in names and {"spam-0", "spam-1", "spam-2", "ops-4"} <= names
    finally:
        gw.stop()


def test_attack_flooding_an_inbox_keeps_it_bounded(clean_redis: str, short_tmp: Path) -> None:
    """500 DMs into bob's inbox: Redis keeps about ``inbox_maxlen`` of them (trimmed approximately,
    by whole nodes of at most 100 entries), never all."""
    gw = GatewayThread(short_tmp / "home", clean_redis, inbox_maxlen=10, rate_limit_per_sec=0)
    gw.start()
    try:
        gw.add_principal("bob")
        with gw.client(gw.add_principal("mallory")) as c:
            for i in range(500):
                assert c.post("/api/dms/bob/messages", json={"text": f"{i}"}).status_code == 201
        client = redis_sync.Redis.from_url(clean_redis)
        try:
            kept = client.xlen(keys.inbox("bob"))
        finally:
            client.close()
        assert 10 <= kept <= 10 + 100, kept
    finally:
        gw.stop()


def test_rate_limit(clean_redis: str, short_tmp: Path) -> None:
    gw = GatewayThread(short_tmp / "home", clean_redis, rate_limit_per_sec=0.5, rate_limit_burst=3)
    gw.start()
    try:
        alice = gw.add_principal("alice")
        bob = gw.add_principal("bob")
        with gw.client(alice) as c:
            codes = [
                c.post("/api/channels/general/messages", json={"text": f"{i}"}).status_code for i in range(4)
            ]
            assert codes == [201, 201, 201, 429]
            limited = c.post("/api/channels/general/messages", json={"text": "again"})
            assert limited.status_code == 429
            assert int(limited.headers["Retry-After"]) >= 1
            assert "rate limit" in limited.json()["detail"]
        with gw.client(bob) as c:
            assert c.post("/api/channels/general/messages", json={"text": "me"}).status_code == 201, (
                "per sender"
            )
        with gw.client(gw.operator_token) as op:
            texts = [m["text"] for m in op.get("/api/channels/general/messages").json()["messages"]]
        assert texts == ["0", "1", "2", "me"], "refused messages are not stored"
    finally:
        gw.stop()


async def test_inbox_wait_wakes_on_dm(gateway: GatewayProcess, agents: dict[str, str]) -> None:
    """The inbox wait is push (XREAD BLOCK): it returns as soon as a DM lands, long before its timeout."""
    latencies = []
    async with gateway.async_client(agents["alice"]) as alice, gateway.async_client(agents["bob"]) as bob:
        for attempt in range(3):
            waiter = asyncio.create_task(bob.get("/api/inbox", params={"wait": 20}))
            await asyncio.sleep(0.3)
            assert not waiter.done()
            posted = await alice.post("/api/dms/bob/messages", json={"text": f"ping {attempt}"})
            sent_at = time.monotonic()
            assert posted.status_code == 201
            reply = await asyncio.wait_for(waiter, 10)
            latencies.append(time.monotonic() - sent_at)
            assert [i["text"] for i in reply.json()["items"]] == [f"ping {attempt}"]
    # Best of three, so a scheduler hiccup on a loaded CI machine does not decide the verdict.
    assert min(latencies) < 0.1, latencies


def test_inbox_peek_and_limits(gateway: GatewayProcess, agents: dict[str, str]) -> None:
    with gateway.client(agents["alice"]) as alice:
        for i in range(3):
            alice.post("/api/dms/bob/messages", json={"text": f"d{i}"})
    with gateway.client(agents["bob"]) as bob:
        assert len(bob.get("/api/inbox", params={"peek": True}).json()["items"]) == 3
        assert [i["text"] for i in bob.get("/api/inbox", params={"limit": 2}).json()["items"]] == ["d0", "d1"]
        assert [i["text"] for i in bob.get("/api/inbox").json()["items"]] == ["d2"]
        started = time.monotonic()
        assert bob.get("/api/inbox", params={"wait": 0.2}).json()["items"] == []
        assert time.monotonic() - started >= 0.15, "an empty inbox waits server-side"


def test_unread_counts_and_read_cursor(gateway: GatewayProcess, agents: dict[str, str]) -> None:
    with gateway.client(gateway.operator_token) as op:
        for i in range(3):
            op.post("/api/channels/general/messages", json={"text": f"n{i}"})
    with gateway.client(agents["alice"]) as alice:
        unread = {c["name"]: c["unread"] for c in alice.get("/api/channels").json()}
        assert unread["general"] == 3


def test_metrics(gateway: GatewayProcess, agents: dict[str, str]) -> None:
    with gateway.client(agents["alice"]) as alice:
        alice.post("/api/dms/bob/messages", json={"text": "x"})
        alice.post("/api/channels/general/messages", json={"text": "y"})
    with gateway.client(agents["bob"]) as bob:
        bob.get("/api/inbox")
    with gateway.client(gateway.operator_token) as op:
        text = op.get("/metrics").text
    assert 'kswarm_messages_posted_total{kind="dm"} 1.0' in text
    assert 'kswarm_messages_posted_total{kind="channel"} 1.0' in text
    assert "kswarm_post_to_inbox_seconds_count 1.0" in text
    assert "kswarm_sse_clients 0.0" in text


def test_openapi_is_complete(gateway: GatewayProcess) -> None:
    with gateway.client(None) as anon:
        spec = anon.get("/openapi.json").json()
    paths = spec["paths"]
    assert "get" in paths["/api/me"] and "get" in paths["/api/agents"]
    assert {"get", "post"} <= set(paths["/api/channels/{channel}/messages"])
    for path in ("/api/inbox", "/api/events", "/api/dms/{peer}/messages", "/api/search", "/api/heartbeat"):
        assert path in paths
    assert "Message" in spec["components"]["schemas"]


def test_component_metrics_are_exposed(gateway: GatewayProcess) -> None:
    """Jobs and queue depth per pool are read at scrape time (every replica reports the same)."""
    with gateway.client(gateway.operator_token) as op:
        text = op.get("/metrics").text
    for line in (
        'kswarm_jobs{pool="cpu",state="queued"} 0.0',
        'kswarm_jobs{pool="cpu",state="running"} 0.0',
        'kswarm_queue_depth{pool="cpu"} 0.0',
        'kswarm_dead_letters{pool="cpu"} 0.0',
    ):
        assert line in text, line
    assert "kswarm_llm_tokens" in text and "kswarm_ui_logins" in text


def test_openapi_declares_every_error_shape(gateway: GatewayProcess) -> None:
    """Every operation, the plugins' included, declares the error shapes it answers (the slow
    schemathesis run, tests/gateway/test_openapi_schemathesis.py, checks the answers against them)."""
    with gateway.client(None) as anon:
        spec = anon.get("/openapi.json").json()
    assert spec["components"]["schemas"]["Refusal"]["properties"]["detail"]["type"] == "string"

    def refs(schema: dict) -> set[str]:
        found = {schema["$ref"].rsplit("/", 1)[-1]} if "$ref" in schema else set()
        return found.union(*(refs(s) for s in schema.get("anyOf", [])))

    for path, item in spec["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            default = refs(responses["default"]["content"]["application/json"]["schema"])
            protocol = {"GiteaError"} if path.startswith("/api/v1/") else set()
            protocol |= {"AnthropicError"} if path.startswith("/v1/") else set()
            assert default == {"Refusal"} | protocol, (method, path)
            if "422" in responses:
                either = refs(responses["422"]["content"]["application/json"]["schema"])
                assert either == {"HTTPValidationError", "Refusal"} | protocol, (method, path)
    assert "default" in spec["paths"]["/api/jobs"]["post"]["responses"], "a plugin's route is covered"
