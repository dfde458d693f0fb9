"""Full-text search over all history (SQLite FTS5 fed from the event stream): ranked, highlighted,
paged, filtered — and honouring DM privacy exactly as the chat does. Attacks: a third agent searching
for words of another pair's DM (by text, by ``in:dm:a:b``, by the channel filter, through the total,
through the MCP tool), FTS5 syntax smuggled in the query, HTML in a message coming back in a snippet."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from search_kit import SearchGateway

from kstest.mcp_client import call, mcp_session


def search(gw: SearchGateway, token: str, **params: Any) -> httpx.Response:
    with gw.client(token) as c:
        return c.get("/api/search/messages", params=params)


def hits(gw: SearchGateway, token: str, q: str, **params: Any) -> list[dict[str, Any]]:
    reply = search(gw, token, q=q, **params)
    assert reply.status_code == 200, reply.text
    return reply.json()["hits"]


def indexed(gw: SearchGateway, q: str, n: int, timeout: float = 20.0) -> None:
    """Wait until the feeder has indexed ``n`` matches of ``q`` (as the operator sees them)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = search(gw, gw.operator_token, q=q, limit=100)
        if reply.status_code == 200 and reply.json()["total"] >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"{q!r}: fewer than {n} matches indexed after {timeout}s")


def post(gw: SearchGateway, token: str, channel: str, text: str) -> None:
    with gw.client(token) as c:
        assert c.post(f"/api/channels/{channel}/messages", json={"text": text}).status_code == 201


def dm(gw: SearchGateway, token: str, peer: str, text: str) -> None:
    with gw.client(token) as c:
        assert c.post(f"/api/dms/{peer}/messages", json={"text": text}).status_code == 201


@pytest.fixture
def pair(search_gw: SearchGateway) -> dict[str, str]:
    tokens = {name: search_gw.add_principal(name) for name in ("alice", "bob", "mallory")}
    post(search_gw, tokens["alice"], "general", "softmax rowwise kernel is 1.8x faster than eager")
    post(search_gw, tokens["bob"], "general", "the softmax tile size should be 1024")
    dm(search_gw, tokens["alice"], "bob", "secret softmax trick: use tl.exp2 with a bias")
    indexed(search_gw, "softmax", 3)
    return tokens


def test_ranked_highlighted_paged_and_filtered(search_gw: SearchGateway, pair: dict[str, str]) -> None:
    gw, op = search_gw, search_gw.operator_token
    found = hits(gw, op, "softmax")
    assert len(found) == 3  # the operator reads the DM too
    assert all("<mark>softmax</mark>" in h["snippet_html"].lower() for h in found)
    assert [h["sender"] for h in hits(gw, op, "softmax from:bob in:general")] == ["bob"]
    assert [h["sender"] for h in hits(gw, op, "softmax", sender="alice", channel="general")] == ["alice"]
    assert [h["channel"] for h in hits(gw, op, '"tile size"')] == ["general"]
    assert len(hits(gw, op, "soft*")) == 3 and hits(gw, op, "tile eager") == []  # every term must match
    first = search(gw, op, q="softmax", limit=2).json()
    second = search(gw, op, q="softmax", limit=2, offset=2).json()
    assert first["total"] == second["total"] == 3 and len(first["hits"]) == 2 and len(second["hits"]) == 1
    assert {h["id"] for h in first["hits"]}.isdisjoint(h["id"] for h in second["hits"])
    newest = hits(gw, op, "softmax", order="newest")
    assert [h["ts"] for h in newest] == sorted((h["ts"] for h in newest), reverse=True)


def test_another_pairs_dm_is_never_found(search_gw: SearchGateway, pair: dict[str, str]) -> None:
    gw, mallory = search_gw, pair["mallory"]
    assert [h["channel"] for h in hits(gw, mallory, "softmax")] == ["general", "general"]
    assert search(gw, mallory, q="softmax").json()["total"] == 2, "the total counts only what she may read"
    for q, params in (
        ("secret", {}),
        ("exp2 bias", {}),
        ("secret in:dm:alice:bob", {}),
        ("secret", {"channel": "dm:alice:bob"}),
        ("secret", {"sender": "alice"}),
        ("trick*", {"kind": "chat"}),
    ):
        reply = search(gw, mallory, q=q, **params)
        assert reply.status_code == 200 and reply.json()["total"] == 0 and reply.json()["hits"] == [], q
    # Either member finds it.
    assert [h["channel"] for h in hits(gw, pair["bob"], "secret")] == ["dm:alice:bob"]
    assert [h["channel"] for h in hits(gw, pair["alice"], "secret")] == ["dm:alice:bob"]

    async def via_mcp() -> Any:
        async with mcp_session(gw.url, mallory) as session:
            return await call(session, "chat_search", query="secret", channel="dm:alice:bob")

    page = asyncio.run(via_mcp())
    assert page["total"] == 0 and page["hits"] == []


@pytest.mark.parametrize(
    "q",
    [
        "secret OR dm_a:alice",
        "text:secret",
        '"secret" NEAR(trick)',
        'secret" OR "1',
        "dm_b:* OR secret",
        "{dm_a dm_b}: secret",
        "^secret",
    ],
)
def test_fts_syntax_in_the_query_is_only_text(search_gw: SearchGateway, pair: dict[str, str], q: str) -> None:
    """Typed operators, column filters and quotes are words to match, never FTS5 syntax: no DM leaks,
    no 500."""
    reply = search(search_gw, pair["mallory"], q=q)
    assert reply.status_code in (200, 400), reply.text
    if reply.status_code == 200:
        assert all(not h["channel"].startswith("dm:") for h in reply.json()["hits"])


def test_html_in_a_message_comes_back_escaped(search_gw: SearchGateway) -> None:
    dev = search_gw.add_principal("dev-1")
    post(search_gw, dev, "general", "payload <script>alert(1)</script> <img src=x onerror=alert(2)>")
    indexed(search_gw, "payload", 1)
    [hit] = hits(search_gw, search_gw.operator_token, "payload alert")
    assert "<script" not in hit["snippet_html"] and "<img" not in hit["snippet_html"]
    assert "&lt;script&gt;" in hit["snippet_html"] and "<mark>" in hit["snippet_html"]


def test_bad_queries_are_clear_refusals(search_gw: SearchGateway) -> None:
    op = search_gw.operator_token
    assert search(search_gw, op, q="").status_code == 422
    assert search(search_gw, op, q="!!! ???").status_code == 400
    assert search(search_gw, op, q="x", limit=0).status_code == 422
    assert search(search_gw, op, q=" ".join(f"w{i}" for i in range(40))).status_code == 400
    assert search(search_gw, None, q="x").status_code == 401  # type: ignore[arg-type]
