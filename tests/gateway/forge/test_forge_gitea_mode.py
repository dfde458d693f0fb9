"""A gateway in Gitea mode: its MCP tools, REST and gate bot drive the Gitea adapter.

Gateway A serves the embedded forge (standing in for Gitea; no gate of its own). Gateway B has its own
principals (another Redis database, as a production gateway's are not Gitea's) and
``KSWARM_FORGE_GITEA_URL`` pointing at A; B's gate learns of reviews from its sweep, reads the PR's
changed files through the adapter, and publishes the kswarm statuses to A.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from forgekit import ForgeGateway, Git, wait_for
from redis.asyncio import Redis

from gateway.forge.evidence import Verification
from gateway.forge.ledger import EvidenceLedger
from gateway.forge.settings import ForgeSettings
from kstest.mcp_client import call, mcp_session


@pytest.fixture(scope="module")
def gitea_mode(quiet_gw: ForgeGateway) -> Iterator[ForgeGateway]:
    tmp = Path(tempfile.mkdtemp(prefix="ksg"))
    sep = "&" if "?" in quiet_gw.redis_url else "?"
    gw = ForgeGateway(tmp / "home", f"{quiet_gw.redis_url}{sep}db=1")
    gw.forge_settings = ForgeSettings(
        gitea_url=quiet_gw.url, gitea_admin_token=quiet_gw.operator_token, gate_sweep_s=0.3
    )
    gw.start()
    gw.tokens = {n: gw.add_principal(n) for n in ("alice", "bob")}
    gw.tokens["worker1"] = gw.add_principal("worker1", "worker")
    try:
        yield gw
    finally:
        gw.stop()
        shutil.rmtree(tmp, ignore_errors=True)


async def test_gate_merges_through_the_gitea_adapter(
    quiet_gw: ForgeGateway, gitea_mode: ForgeGateway, short_tmp: Path
) -> None:
    with gitea_mode.op() as op:
        assert op.get("/api/forge").json()["kind"] == "gitea"
        info = op.post("/api/forge/repos", json={"org": "gm", "name": "kernels"}).json()
        policy = {"required_approvals": 1, "required_checks": ["kswarm/verify:cpu"]}
        assert op.put("/api/forge/repos/gm/kernels/policy", json=policy).status_code == 200
    assert info["clone_url"] == f"{quiet_gw.url}/git/gm/kernels.git"
    # git goes to "Gitea" (A) with A's token for alice
    git = Git(short_tmp / "h", quiet_gw.tokens["alice"], "alice", "alice@agents.test")
    work = git.clone(info["clone_url"], short_tmp / "w")
    git.run("checkout", "-q", "-b", "alice/gm", cwd=work)
    kernel = "kernels/add/alice_k.py"
    sha = git.commit(work, kernel, "k\n", "k")
    assert git.push(work, "alice/gm").returncode == 0
    # agents use B's MCP tools with B's tokens; B acts on Gitea with Sudo
    async with mcp_session(gitea_mode.url, gitea_mode.tokens["alice"]) as alice:
        opened = await call(
            alice, "pr_open", head="alice/gm", title="via gitea", reviewers=["bob"], repo="gm/kernels"
        )
    number = opened["number"]
    async with mcp_session(gitea_mode.url, gitea_mode.tokens["bob"]) as bob:
        assert any("gm/kernels#" in i["text"] for i in await call(bob, "inbox"))
        await call(bob, "pr_review", number=number, event="APPROVED", repo="gm/kernels")
        view = await call(bob, "pr_view", number=number, repo="gm/kernels")
        assert {r["code"] for r in view["gate"]["reasons"]} == {"kernel-unverified"}
        assert [k["path"] for k in view["gate"]["kernels"]] == [kernel], "changed files read from Gitea"
    # B's job runner records the verification in B's ledger; B's gate publishes the statuses to
    # "Gitea" and merges as `gate` (Gitea's own merge check reads the aggregate status)
    record = Verification(
        job_id="j1", repo="gm/kernels", sha=sha, kernel=kernel, task="add", pool="cpu", kind="verify",
        submitter="alice", state="succeeded", verdict="pass",
    )  # fmt: skip
    redis = Redis.from_url(gitea_mode.redis_url, decode_responses=True)
    await EvidenceLedger(redis).record(record)
    await redis.aclose()
    with quiet_gw.gitea(quiet_gw.operator_token) as admin:
        merged = wait_for(
            lambda: (pr := admin.get(f"/repos/gm/kernels/pulls/{number}").json())["merged"] and pr
        )
    assert merged["merged_by"]["login"] == "gate"
    with quiet_gw.gitea(quiet_gw.operator_token) as admin:
        combined = admin.get(f"/repos/gm/kernels/commits/{sha}/status").json()
    published = {(x["context"], x["status"], x["creator"]["login"]) for x in combined["statuses"]}
    assert published == {
        ("kswarm/verify:cpu", "success", "gate"),
        ("kswarm/verify:cpu/add/alice_k.py", "success", "gate"),
    }
    with gitea_mode.op() as op:
        texts = [m["text"] for m in op.get("/api/channels/reviews/messages").json()["messages"]]
    assert any(f"@alice gm/kernels#{number}" in t and "merged into main" in t for t in texts)


def test_provisioning_creates_the_agents_gitea_account(
    quiet_gw: ForgeGateway, gitea_mode: ForgeGateway
) -> None:
    """The orchestrator's provisioning step, against a gateway in Gitea mode, creates the agent's
    account on the Gitea side (A), once, with the principal."""
    from gateway.client.http import GatewayClient, GatewayTarget
    from orchestrator.provision import ensure_forge_account

    with gitea_mode.op() as op:
        op.post("/api/principals", json={"name": "carol"}).raise_for_status()
    with GatewayClient(GatewayTarget(token=gitea_mode.operator_token, url=gitea_mode.url)) as client:
        ensure_forge_account(client, "carol")
    with quiet_gw.op() as a:
        assert a.get("/api/me").status_code == 200
        names = {p["name"] for p in a.get("/api/principals").json()}
    assert "carol" in names, "the Gitea side (A) now knows carol"
