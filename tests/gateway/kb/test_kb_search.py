"""The knowledge base against a real forge: seeded notes are searchable, a note merged through the review
gate a moment ago is found at once, and a note on an unmerged branch never is."""

from __future__ import annotations

import time

import pytest
from forgekit import Swarm
from kbkit import KBGateway

from gateway.kb.index import Bm25Index, split_passages
from kstest.mcp_client import ToolFailed, call, mcp_session

NOTE = """# Zebra kernels

## The xylophone quirk

On the npu pool a reduction over a xylophone-shaped tensor needs the quokka flag.
Measured on task softmax, PR #3.
"""
UNMERGED = "# Unreviewed\n\nThe marmalade trick doubles speed (nobody reviewed this).\n"


@pytest.fixture(scope="module")
def kb(kb_gw: KBGateway, tmp_path_factory: pytest.TempPathFactory) -> Swarm:
    swarm = Swarm(kb_gw, tmp_path_factory.mktemp("kb"), "kswarm", "kb", kb_gw.tokens)
    swarm.set_policy(required_approvals=1, required_checks=["ci/kb-lint"])
    return swarm


def search(gw: KBGateway, token: str, q: str) -> dict:
    with gw.client(token) as c:
        reply = c.get("/api/kb/search", params={"q": q, "limit": 5})
    assert reply.status_code == 200, reply.text
    return reply.json()


def main_head(swarm: Swarm) -> str:
    git, work = swarm.clone("carol", f"head-{time.monotonic_ns()}")
    return git.head(work, "origin/main")


def test_kb_seeded_notes_are_ranked(kb_gw: KBGateway, kb: Swarm) -> None:
    found = search(kb_gw, kb_gw.tokens["alice"], "mask non-multiple sizes other value for softmax")
    head = main_head(kb)
    assert found["commit"] == head and found["repo"] == "kswarm/kb"
    top = found["results"][0]
    assert top["file"] == "notes/triton-masking.md" and top["commit"] == head and top["line"] > 1
    assert "non-multiple" in top["heading"].lower() and top["score"] > 0
    ascend = search(kb_gw, kb_gw.tokens["alice"], "torch_npu device npu")["results"][0]
    assert ascend["file"] == "notes/triton-ascend.md"
    interp = search(kb_gw, kb_gw.tokens["alice"], "TRITON_INTERPRET bf16 autotune")["results"][0]
    assert interp["file"] == "notes/triton-interpreter.md"


async def test_kb_finds_a_merged_note_at_once_and_never_an_unmerged_one(kb_gw: KBGateway, kb: Swarm) -> None:
    alice, bob = kb_gw.tokens["alice"], kb_gw.tokens["bob"]
    # carol proposes a note nobody approves; alice proposes one that goes through review.
    _, _, carol_sha = kb.push_branch("carol", "carol/kb-marmalade", "notes/marmalade.md", UNMERGED)
    kb.open_pr("carol", "carol/kb-marmalade", reviewers=("bob",))
    _, _, sha = kb.push_branch("alice", "alice/kb-zebra", "notes/zebra.md", NOTE)
    number = kb.open_pr("alice", "alice/kb-zebra", reviewers=("bob",))
    for q in ("xylophone quokka", "marmalade"):
        assert search(kb_gw, alice, q)["results"] == [], "unmerged branches are never searched"
    with kb_gw.client(alice) as c:
        assert c.get("/api/kb/files/notes/zebra.md").status_code == 404

    assert kb.review("bob", number, "APPROVED").status_code == 200
    assert kb.status("worker1", sha, "success", "ci/kb-lint").status_code == 201
    merged = kb.wait_merged(number)
    head = main_head(kb)
    assert merged["merge_commit_sha"] == head

    found = search(kb_gw, alice, "xylophone quokka")  # right after the merge: no reindex call needed
    assert found["commit"] == head
    assert [(r["file"], r["commit"]) for r in found["results"]][:1] == [("notes/zebra.md", head)]
    assert found["results"][0]["heading"] == "Zebra kernels > The xylophone quirk"
    assert search(kb_gw, alice, "marmalade")["results"] == [], "still unmerged: still invisible"
    assert carol_sha not in {r["commit"] for r in found["results"]}

    async with mcp_session(kb_gw.url, bob) as session:
        hits = await call(session, "kb_search", query="xylophone-shaped reduction", limit=3)
        assert hits["results"][0]["file"] == "notes/zebra.md" and hits["commit"] == head
        note = await call(session, "kb_read", file="notes/zebra.md")
        assert note["text"] == NOTE and note["commit"] == head
        with pytest.raises(ToolFailed, match="no note"):
            await call(session, "kb_read", file="notes/marmalade.md")
        tool = next(t for t in (await session.list_tools()).tools if t.name == "kb_search")
        assert len(tool.description or "") <= 120


def test_kb_passages_and_bm25() -> None:
    text = (
        "# Title\n\nIntro line.\n\n## Loads\n\nUse a mask:\n```python\nx = tl.load(p, mask=m)\n\ny = 1\n```\n"
    )
    passages = split_passages("notes/a.md", text)
    assert [(p.heading, p.line) for p in passages] == [("Title", 3), ("Title > Loads", 7)]
    assert "y = 1" in passages[1].text, "a code block stays whole, with the line that introduces it"
    other = split_passages("notes/b.md", "# Other\n\nNothing about loading here, only stores.\n")
    index = Bm25Index(passages + other)
    assert [p.file for _, p in index.search("tl.load mask")] == ["notes/a.md"]
    assert index.search("") == [] and index.search("zzz") == []


def test_kb_refuses_an_unprotected_branch(kb_gw: KBGateway, kb: Swarm) -> None:
    """Runs last in this module: without protection on main, nothing guarantees a review."""
    with kb.api("operator") as api:
        assert api.delete("/repos/kswarm/kb/branch_protections/main").status_code == 204
    try:
        with kb_gw.client(kb_gw.tokens["alice"]) as c:
            reply = c.get("/api/kb/search", params={"q": "mask"})
        assert reply.status_code == 409 and "not protected" in reply.text
    finally:
        kb.set_policy(required_approvals=1)
    assert search(kb_gw, kb_gw.tokens["alice"], "mask")["results"]
