"""A gateway in Gitea mode: its MCP tools, REST, KB, task seeding and gate bot drive the Gitea adapter,
and Gitea's webhooks make the gate act at once.

Gateway A serves the embedded forge (standing in for Gitea; no gate of its own; it delivers webhooks as
Gitea does). Gateway B has its own principals (another Redis database, as a production gateway's are
not Gitea's), ``KSWARM_FORGE_GITEA_URL`` pointing at A and a webhook secret; every repo B ensures gets
a hook to B's receiver. B's gate sweeps only once an hour here, so whatever it does after start-up it
does because a signed hook (or one of B's own events) told it.
"""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as redis_sync
from forgekit import ForgeGateway, Git
from redis.asyncio import Redis

from gateway.forge import keys
from gateway.forge.gate.evidence import Verification
from gateway.forge.gate.ledger import EvidenceLedger
from gateway.forge.gate.vouched import OperatorHeads, operator_heads
from gateway.forge.gitea.webhook import HOOK_PATH, repo_secret
from gateway.forge.hooks_out import signature
from gateway.forge.settings import ForgeSettings
from kstest.mcp_client import call, mcp_session
from kstest.waiting import wait_for

SECRET = "test-webhook-master-secret"


@pytest.fixture(scope="module")
def gitea_mode(quiet_gw: ForgeGateway) -> Iterator[ForgeGateway]:
    tmp = Path(tempfile.mkdtemp(prefix="ksg"))
    sep = "&" if "?" in quiet_gw.redis_url else "?"
    gw = ForgeGateway(tmp / "home", f"{quiet_gw.redis_url}{sep}db=1")
    gw.forge_settings = ForgeSettings(
        gitea_url=quiet_gw.url,
        gitea_admin_token=quiet_gw.operator_token,
        gitea_webhook_url=f"{gw.url}{HOOK_PATH}",
        gitea_webhook_secret=SECRET,
        gate_sweep_s=3600,
    )
    gw.start()
    gw.tokens = {n: gw.add_principal(n) for n in ("alice", "bob")}
    gw.tokens["worker1"] = gw.add_principal("worker1", "worker")
    try:
        yield gw
    finally:
        gw.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def events_len(gw: ForgeGateway) -> int:
    client = redis_sync.Redis.from_url(gw.redis_url)
    try:
        return int(client.xlen(keys.EVENTS))
    finally:
        client.close()


def agent_git(gitea: ForgeGateway, tmp: Path, who: str) -> Git:
    """git as ``who`` against "Gitea" (A), with A's token: git never goes through B."""
    return Git(tmp / f"h-{who}", gitea.tokens[who], who, f"{who}@agents.{gitea.swarm}")


async def test_gate_merges_on_a_gitea_webhook(
    quiet_gw: ForgeGateway, gitea_mode: ForgeGateway, short_tmp: Path
) -> None:
    with gitea_mode.op() as op:
        assert op.get("/api/forge").json()["kind"] == "gitea"
        info = op.post("/api/forge/repos", json={"org": "gm", "name": "kernels"}).json()
        policy = {"required_approvals": 1, "required_checks": ["kswarm/verify:cpu"]}
        assert op.put("/api/forge/repos/gm/kernels/policy", json=policy).status_code == 200
    assert info["clone_url"] == f"{quiet_gw.url}/git/gm/kernels.git"
    with quiet_gw.gitea(quiet_gw.operator_token) as admin:
        hooks = admin.get("/repos/gm/kernels/hooks").json()
    assert [h["config"]["url"] for h in hooks] == [f"{gitea_mode.url}{HOOK_PATH}"], "B registered its hook"
    git = agent_git(quiet_gw, short_tmp, "alice")
    work = git.clone(info["clone_url"], short_tmp / "w")
    git.run("checkout", "-q", "-b", "alice/gm", cwd=work)
    kernel = "kernels/add/alice_k.py"
    sha = git.commit(work, kernel, "k\n", "k")
    assert git.push(work, "alice/gm").returncode == 0
    # agents use B's MCP tools with B's tokens; B acts on Gitea with Sudo; no repo named: B's default
    async with mcp_session(gitea_mode.url, gitea_mode.tokens["alice"]) as alice:
        opened = await call(alice, "pr_open", head="alice/gm", title="via gitea", reviewers=["bob"])
    number = opened["number"]
    assert opened["repo"] == "gm/kernels"
    # B's job runner records a pass in B's ledger (B's own event); the gate still waits for a review
    record = Verification(
        job_id="j1", repo="gm/kernels", sha=sha, kernel=kernel, task="add", pool="cpu", kind="verify",
        submitter="alice", state="succeeded", verdict="pass", evidence="cpu-screened",
    )  # fmt: skip
    redis = Redis.from_url(gitea_mode.redis_url, decode_responses=True)
    await EvidenceLedger(redis).record(record)
    await redis.aclose()
    async with mcp_session(gitea_mode.url, gitea_mode.tokens["bob"]) as bob:
        assert any("gm/kernels#" in i["text"] for i in await call(bob, "inbox"))
        view = await call(bob, "pr_view", number=number, repo="gm/kernels")
        assert [k["path"] for k in view["gate"]["kernels"]] == [kernel], "changed files read from Gitea"
    # The gate has weighed the pass (and blocked: no review yet) before bob reviews; otherwise a slow
    # gate meets the pass after the approval and the merge's cause is the verification, not the review.
    with gitea_mode.op() as op:
        audit_url = f"/api/forge/repos/gm/kernels/pulls/{number}"

        def weighed() -> bool:
            audit = op.get(audit_url).json()["audit"]
            return any("verification" in (a.get("cause"), a.get("last_cause")) for a in audit)

        wait_for(weighed)
    # bob approves in Gitea itself (A), which only a webhook can tell B about: no sweep for an hour
    with quiet_gw.gitea(quiet_gw.tokens["bob"]) as bob_in_gitea:
        bob_in_gitea.post(
            f"/repos/gm/kernels/pulls/{number}/reviews", json={"event": "APPROVED"}
        ).raise_for_status()
    with quiet_gw.gitea(quiet_gw.operator_token) as admin:
        merged = wait_for(
            lambda: (pr := admin.get(f"/repos/gm/kernels/pulls/{number}").json())["merged"] and pr
        )
        combined = admin.get(f"/repos/gm/kernels/commits/{sha}/status").json()
    assert merged["merged_by"]["login"] == "gate" and merged["merged_at"]
    published = {(x["context"], x["status"], x["creator"]["login"]) for x in combined["statuses"]}
    assert published == {
        ("kswarm/verify:cpu", "success", "gate"),
        ("kswarm/verify:cpu/add/alice_k.py", "success", "gate"),
    }
    with gitea_mode.op() as op:
        audit = op.get(f"/api/forge/repos/gm/kernels/pulls/{number}").json()["audit"]
        texts = [m["text"] for m in op.get("/api/channels/reviews/messages").json()["messages"]]
    assert audit[-1]["action"] == "merged" and audit[-1]["cause"] == "review", (
        "a hook's review event merged it"
    )
    assert any(f"@alice gm/kernels#{number}" in t and "merged into main" in t for t in texts)


def hook_body(repo: str, number: int = 1) -> bytes:
    return json.dumps(
        {
            "action": "reviewed",
            "number": number,
            "repository": {"full_name": repo},
            "sender": {"login": "bob"},
        }
    ).encode()


def deliver(
    gw: ForgeGateway, body: bytes, sig: str | None, event: str = "pull_request_approved"
) -> httpx.Response:
    headers = {"Content-Type": "application/json", "X-Gitea-Event": event}
    if sig is not None:
        headers["X-Gitea-Signature"] = sig
    return httpx.post(f"{gw.url}{HOOK_PATH}", content=body, headers=headers)


def test_forged_and_replayed_hooks_are_refused_and_change_nothing(gitea_mode: ForgeGateway) -> None:
    with gitea_mode.op() as op:
        for name in ("hooked", "other"):
            assert op.post("/api/forge/repos", json={"org": "gm", "name": name}).status_code == 201
    good = hook_body("gm/hooked")
    hooked_secret = repo_secret(SECRET, "gm/hooked")
    before = events_len(gitea_mode)
    attacks: dict[str, tuple[bytes, str | None]] = {
        "unsigned": (good, None),
        "empty signature": (good, ""),
        "signed with a guessed secret": (good, signature("kswarm", good)),
        "signed with the master secret itself": (good, signature(SECRET, good)),
        # a delivery captured for gm/hooked, its repository changed to gm/other, signature kept
        "replayed to another repo": (hook_body("gm/other"), signature(hooked_secret, good)),
        # gm/hooked's secret (say, read from its hook settings) signing a body about gm/other
        "one repo's secret for another": (
            hook_body("gm/other"),
            signature(hooked_secret, hook_body("gm/other")),
        ),
        "not a payload": (b"[]", signature(hooked_secret, b"[]")),
    }
    for what, (body, sig) in attacks.items():
        reply = deliver(gitea_mode, body, sig)
        assert reply.status_code == 401, (what, reply.status_code, reply.text)
    unknown = hook_body("gm/not-ours")
    assert (
        deliver(gitea_mode, unknown, signature(repo_secret(SECRET, "gm/not-ours"), unknown)).status_code
        == 404
    )
    assert events_len(gitea_mode) == before, "no refused hook reached the gate"
    accepted = deliver(gitea_mode, good, signature(hooked_secret, good))
    assert accepted.status_code == 200 and accepted.json()["queued"] is True
    assert events_len(gitea_mode) == before + 1
    replay = deliver(gitea_mode, good, signature(hooked_secret, good))
    assert replay.status_code == 409, "the same signed delivery twice"
    assert events_len(gitea_mode) == before + 1


def kb_search(gw: ForgeGateway, token: str, q: str) -> dict[str, Any]:
    with gw.client(token) as c:
        reply = c.get("/api/kb/search", params={"q": q})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_kb_and_task_seeding_in_gitea_mode(
    quiet_gw: ForgeGateway, gitea_mode: ForgeGateway, short_tmp: Path
) -> None:
    alice_b = gitea_mode.tokens["alice"]
    found = kb_search(gitea_mode, alice_b, "mask non-multiple sizes")  # the first use creates and seeds
    with quiet_gw.gitea(quiet_gw.operator_token) as admin:
        main = admin.get("/repos/kswarm/kb/branches/main").json()
    assert (
        found["commit"] == main["commit"]["id"] and found["results"][0]["file"] == "notes/triton-masking.md"
    )
    with gitea_mode.op() as op:
        assert op.get("/api/forge/default-repo").json()["repo"] != "kswarm/kb", "the KB is never a default"
    # a note through review: pushed to Gitea, PR through B, approved in Gitea, merged by B's gate
    git = agent_git(quiet_gw, short_tmp, "alice")
    work = git.clone(f"{quiet_gw.url}/git/kswarm/kb.git", short_tmp / "kb")
    git.run("checkout", "-q", "-b", "alice/kb-zebra", cwd=work)
    git.commit(work, "notes/zebra.md", "# Zebra\n\nThe quokka flag on xylophone tensors.\n", "zebra")
    assert git.push(work, "alice/kb-zebra").returncode == 0
    assert kb_search(gitea_mode, alice_b, "quokka xylophone")["results"] == [], "unmerged: not searched"
    with quiet_gw.gitea(quiet_gw.tokens["alice"]) as alice:
        number = alice.post(
            "/repos/kswarm/kb/pulls", json={"head": "alice/kb-zebra", "base": "main", "title": "zebra"}
        ).json()["number"]
    with quiet_gw.gitea(quiet_gw.tokens["bob"]) as bob:
        bob.post(f"/repos/kswarm/kb/pulls/{number}/reviews", json={"event": "APPROVED"}).raise_for_status()
    wait_for(lambda: kb_search(gitea_mode, alice_b, "quokka xylophone")["results"], timeout=20)
    # the dataset repo: created, made a dataset branch and seeded on Gitea, its tasks on B's board
    with gitea_mode.op() as op:
        seeded = op.post("/api/tasks/seed", json={}).json()
        definition = op.get("/api/tasks/add/definition").json()
        policy = op.get("/api/forge/repos/kswarm/dataset/policy/main").json()
    assert seeded["seeded"] and "add" in seeded["posted"] and policy["dataset"] is True
    with quiet_gw.gitea(quiet_gw.operator_token) as admin:
        in_gitea = admin.get("/repos/kswarm/dataset/contents/tasks/add/task.py").json()
        log = admin.get(f"/repos/kswarm/dataset/git/commits/{seeded['seeded']}").json()
    assert definition["source"] == "repo" and definition["blob_sha"] == in_gitea["sha"]
    assert log["commit"]["author"]["email"] == f"gate@bots.{quiet_gw.swarm}" and len(log["parents"]) == 1
    assert definition["commit"] == seeded["seeded"]


def test_provisioning_creates_the_agents_gitea_account(
    quiet_gw: ForgeGateway, gitea_mode: ForgeGateway
) -> None:
    """The orchestrator's provisioning step, against a gateway in Gitea mode, creates the agent's
    account on the Gitea side (A), once, with the principal."""
    from gateway.client.http import GatewayClient, GatewayTarget
    from orchestrator.swarm_dir.provision import ensure_forge_account

    with gitea_mode.op() as op:
        op.post("/api/principals", json={"name": "carol"}).raise_for_status()
    with GatewayClient(GatewayTarget(token=gitea_mode.operator_token, url=gitea_mode.url)) as client:
        ensure_forge_account(client, "carol")
    with quiet_gw.op() as a:
        assert a.get("/api/me").status_code == 200
        names = {p["name"] for p in a.get("/api/principals").json()}
    assert "carol" in names, "the Gitea side (A) now knows carol"


CATALOGUE_ADD = (
    Path(__file__).resolve().parents[3] / "gateway/tasks/catalogue/tasks/add/task.py"
).read_text()


def task_source(name: str) -> str:
    """The catalogue's add task under another name (a task the dataset repo does not have yet)."""
    return CATALOGUE_ADD.replace('NAME = "add"', f'NAME = "{name}"').replace(
        'ENTRY = "add"', f'ENTRY = "{name}"'
    )


def test_attack_a_push_onto_an_operators_task_pr_loses_its_trusted_path_exemption(
    quiet_gw: ForgeGateway, gitea_mode: ForgeGateway
) -> None:
    """Gitea lets any writer push to any unprotected branch, the operator's task PR branch included. A
    head moved there is not one kswarm committed for the operator, so the PR's trusted files block it
    whoever approves; an untouched task PR merges as before."""
    with gitea_mode.op() as op:
        assert op.post("/api/tasks/seed", json={}).status_code == 200  # the dataset repo (idempotent)
        clean = op.post("/api/tasks/definitions", json={"name": "axpy", "task_py": task_source("axpy")})
        target = op.post("/api/tasks/definitions", json={"name": "axpz", "task_py": task_source("axpz")})
    assert clean.status_code == 201 and target.status_code == 201, (clean.text, target.text)
    clean_pr, target_pr = clean.json(), target.json()
    path = "tasks/axpz/task.py"
    # The push, as any writer's would land in Gitea (the stand-in keeps agents to their own branches, so
    # it is made with Gitea's admin token): the task's reference now agrees with whatever kernel is wrong.
    with quiet_gw.gitea(quiet_gw.operator_token) as writer:
        current = writer.get(f"/repos/kswarm/dataset/contents/{path}", params={"ref": target_pr["branch"]})
        forged = task_source("axpz").replace("return x + y", "return x - y")
        assert forged != task_source("axpz")
        pushed = writer.post(
            "/repos/kswarm/dataset/contents",
            json={
                "branch": target_pr["branch"],
                "message": "tweak the reference",
                "files": [
                    {
                        "operation": "update",
                        "path": path,
                        "content": base64.b64encode(forged.encode()).decode(),
                        "sha": current.json()["sha"],
                    }
                ],
            },
        )
        assert pushed.status_code in (200, 201), pushed.text
        moved_to = pushed.json()["commit"]["sha"]
    with quiet_gw.gitea(quiet_gw.tokens["bob"]) as bob_in_gitea:
        for number in (clean_pr["pr"], target_pr["pr"]):
            reply = bob_in_gitea.post(
                f"/repos/kswarm/dataset/pulls/{number}/reviews", json={"event": "APPROVED"}
            )
            reply.raise_for_status()
    with quiet_gw.gitea(quiet_gw.operator_token) as admin:
        wait_for(lambda: admin.get(f"/repos/kswarm/dataset/pulls/{clean_pr['pr']}").json()["merged"])
    # Merged, its head vouches for nothing any more (nor would a closed one's, were it reopened).
    recorded = redis_sync.Redis.from_url(gitea_mode.redis_url, decode_responses=True)
    try:
        wait_for(lambda: not recorded.hexists(operator_heads("kswarm/dataset"), clean_pr["commit"]))
    finally:
        recorded.close()
    with gitea_mode.op() as op:

        def blocked_with_bob() -> dict[str, Any] | None:
            view = op.get(f"/api/forge/repos/kswarm/dataset/pulls/{target_pr['pr']}").json()
            decided = [
                a for a in view["audit"]
                if a["action"] == "blocked" and a["head_sha"] == moved_to and "bob" in a["approvals"]
            ]  # fmt: skip
            return view if decided else None

        view = wait_for(blocked_with_bob)
    assert view["state"] == "open" and view["head_sha"] == moved_to
    blocked = {b["path"]: b["why"] for b in view["gate"]["blocked_paths"]}
    assert path in blocked and "not one kswarm committed for an operator" in blocked[path], blocked


async def test_a_recorded_head_vouches_only_for_its_branch_and_base(quiet_gw: ForgeGateway) -> None:
    """The same commit on another branch, or its PR retargeted at another protected branch (whose whole
    history would then read as the operator's change), is not what kswarm committed for the operator."""
    redis = Redis.from_url(quiet_gw.redis_url, decode_responses=True)
    try:
        heads = OperatorHeads(redis)
        sha = "c0ffee" * 6 + "c0ff"
        await heads.record("vouch/dataset", sha, "operator/task-x-1", "main")
        assert await heads.vouches("vouch/dataset", sha, "operator/task-x-1", "main")
        assert not await heads.vouches("vouch/dataset", sha, "dev-1/task-x", "main")
        assert not await heads.vouches("vouch/dataset", sha, "operator/task-x-1", "release")
        assert not await heads.vouches("vouch/other", sha, "operator/task-x-1", "main")
        await heads.forget("vouch/dataset", sha)
        assert not await heads.vouches("vouch/dataset", sha, "operator/task-x-1", "main")
    finally:
        await redis.aclose()
