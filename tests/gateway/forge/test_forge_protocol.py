"""One Forge protocol suite, run against both implementations.

``embedded``: the EmbeddedForge class in this process (same Redis and repositories as the gateway).
``gitea``: the Gitea adapter over HTTP against the embedded forge's Gitea-shaped ``/api/v1`` routes
(with a Redis for kswarm's own branch rules, as the plugin builds it). The gateway runs without its gate
bot here, so that merges happen only when a test asks for one. Repository content (refs, commits,
files, server-side commits, seeding) is in ``test_forge_protocol_content.py``, on the same fixture.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from forgekit import ForgeGateway, Git

from gateway.errors import ForgeError
from gateway.forge.gate.policy import ReviewPolicy
from gateway.forge.protocol import Forge


def unique(prefix: str, forge: Forge) -> str:
    return f"{prefix}-{forge.kind[0]}{uuid.uuid4().hex[:8]}"


def agent_git(gw: ForgeGateway, tmp: Path, name: str) -> Git:
    return Git(tmp / f"h-{name}", gw.tokens[name], name, f"{name}@agents.{gw.swarm}")


async def test_ensure_user_returns_a_working_token(forge: Forge, quiet_gw: ForgeGateway) -> None:
    name = unique("dave", forge)
    first = await forge.ensure_user(name, f"{name}@agents.test")
    again = await forge.ensure_user(name, f"{name}@agents.test")
    assert first.name == again.name == name and first.email == f"{name}@agents.test"
    assert first.token and again.token and first.token != again.token
    for token in (first.token, again.token):
        with quiet_gw.gitea(token) as api:
            assert api.get("/user").json()["login"] == name


async def test_ensure_repo_is_idempotent_and_searchable(forge: Forge) -> None:
    name = unique("repo", forge)
    info = await forge.ensure_repo("proto", name)
    again = await forge.ensure_repo("proto", name)
    assert info.full_name == again.full_name == f"proto/{name}"
    assert info.default_branch == "main"
    assert info.clone_url.endswith(f"/git/proto/{name}.git")
    found = await forge.list_repos(name)
    assert [r.full_name for r in found] == [f"proto/{name}"]
    assert found[0].clone_url == info.clone_url
    await forge.add_collaborator("proto", name, "alice", "write")
    with pytest.raises(ForgeError) as exc:
        await forge.add_collaborator("proto", name, "nobody-at-all", "write")
    assert exc.value.status == 404


async def test_branch_protection_round_trip(forge: Forge) -> None:
    name = unique("prot", forge)
    await forge.ensure_repo("proto", name)
    policy = ReviewPolicy(required_approvals=2, required_checks=["kswarm/verify:cpu", "kswarm/verify:npu"])
    await forge.protect_branch("proto", name, "release", policy)
    got = await forge.get_protection("proto", name, "release")
    assert got is not None
    assert (got.required_approvals, got.required_checks) == (2, ["kswarm/verify:cpu", "kswarm/verify:npu"])
    await forge.protect_branch(
        "proto", name, "release", ReviewPolicy(required_approvals=1, require_reproduction=True)
    )
    got = await forge.get_protection("proto", name, "release")
    assert got is not None and got.required_approvals == 1 and got.required_checks == []
    assert got.require_reproduction  # kswarm's rule: kept beside Gitea's protection (gitea/policy.py)
    await forge.protect_branch("proto", name, "release", ReviewPolicy(dataset=True, human_approvals=2))
    got = await forge.get_protection("proto", name, "release")
    assert got is not None and got.dataset and got.human_approvals == 2 and not got.require_reproduction
    assert await forge.get_protection("proto", name, "unprotected") is None


async def test_pull_request_lifecycle(forge: Forge, quiet_gw: ForgeGateway, short_tmp: Path) -> None:
    name = unique("life", forge)
    info = await forge.ensure_repo("proto", name)
    await forge.protect_branch("proto", name, "main", ReviewPolicy(required_checks=["kswarm/verify:cpu"]))
    git = agent_git(quiet_gw, short_tmp, "alice")
    work = git.clone(info.clone_url, short_tmp / "w")
    git.run("checkout", "-q", "-b", "alice/life", cwd=work)
    git.commit(work, "kernels/add/alice_old.py", "old\n", "a kernel to rename")
    git.run("mv", "kernels/add/alice_old.py", "kernels/add/alice_life.py", cwd=work)
    sha = git.commit(work, "kernel.py", "def kernel(): return 1\n", "a kernel")
    assert git.push(work, "alice/life").returncode == 0

    pr = await forge.open_pr("alice", "proto", name, "alice/life", "main", "A kernel", "body text", ["bob"])
    assert (pr.number, pr.author, pr.head, pr.base, pr.head_sha) == (1, "alice", "alice/life", "main", sha)
    assert pr.requested_reviewers == ["bob"] and pr.state == "open" and not pr.merged
    with pytest.raises(ForgeError) as exc:
        await forge.open_pr("alice", "proto", name, "alice/life", "main", "again")
    assert exc.value.status == 409
    listed = await forge.list_prs("proto", name)
    assert [(p.number, p.head_sha) for p in listed] == [(1, sha)]
    assert "+def kernel(): return 1" in (await forge.pr_diff("proto", name, 1)).text
    assert (await forge.get_pr("proto", name, 1)).mergeable is True
    # changed files since the merge base: a file added then renamed within the PR is one added file
    changed = {(f.path, f.status) for f in await forge.pr_files("proto", name, 1)}
    assert changed == {("kernel.py", "added"), ("kernels/add/alice_life.py", "added")}
    base = pr.base_sha or (await forge.get_pr("proto", name, 1)).base_sha
    assert base is not None
    compared = {(f.path, f.status) for f in await forge.compare_files("proto", name, base, sha)}
    assert compared == changed, "the PR's files are the head's changes since the merge base"
    assert await forge.compare_files("proto", name, sha, base) == [], "the base changed nothing since"
    with pytest.raises(ForgeError) as exc:
        await forge.compare_files("proto", name, base, "f" * 40)
    assert exc.value.status == 404

    with pytest.raises(ForgeError) as exc:
        await forge.review("alice", "proto", name, 1, "APPROVED")
    assert exc.value.status == 422
    with pytest.raises(ForgeError) as exc:
        await forge.review("bob", "proto", name, 1, "REQUEST_CHANGES")  # needs a body
    assert exc.value.status == 422
    with pytest.raises(ForgeError) as exc:  # pinned to a head that is not (or no longer) the head
        await forge.review("bob", "proto", name, 1, "APPROVED", "lgtm", commit_id="f" * 40)
    assert exc.value.status == 409
    approval = await forge.review("bob", "proto", name, 1, "APPROVED", "lgtm", commit_id=sha)
    assert (approval.user, approval.state, approval.commit_id) == ("bob", "APPROVED", sha)
    await forge.comment("carol", "proto", name, 1, "nice one")
    assert [(c.user, c.body) for c in await forge.comments("proto", name, 1)] == [("carol", "nice one")]

    with pytest.raises(ForgeError) as exc:
        await forge.set_status("alice", "proto", name, sha, "success", "kswarm/verify:cpu")
    assert exc.value.status == 403

    with pytest.raises(ForgeError) as exc:  # the required check has not reported
        await forge.merge("gate", "proto", name, 1, sha)
    assert exc.value.status == 405 and "kswarm/verify:cpu" in str(exc.value)
    with pytest.raises(ForgeError) as exc:  # kswarm/ statuses are the gateway's, not a worker's
        await forge.set_status("worker1", "proto", name, sha, "success", "kswarm/verify:cpu")
    assert exc.value.status == 403
    status = await forge.set_status(
        "gate", "proto", name, sha, "success", "kswarm/verify:cpu", "3/3 shapes", "http://jobs/1"
    )
    assert (status.state, status.context, status.creator) == ("success", "kswarm/verify:cpu", "gate")
    pr = await forge.get_pr("proto", name, 1)
    assert [(r.user, r.state) for r in pr.reviews] == [("bob", "APPROVED")]
    assert [(s.context, s.state, s.description, s.target_url) for s in pr.statuses] == [
        ("kswarm/verify:cpu", "success", "3/3 shapes", "http://jobs/1")
    ]

    with pytest.raises(ForgeError) as exc:
        await forge.merge("gate", "proto", name, 1, "0" * 40)
    assert exc.value.status == 409  # head out of date
    with pytest.raises(ForgeError) as exc:
        await forge.merge("bob", "proto", name, 1, sha)
    assert exc.value.status == 405  # only the gate merges
    result = await forge.merge("gate", "proto", name, 1, sha)
    assert result.merged and result.merge_sha
    pr = await forge.get_pr("proto", name, 1)
    assert pr.merged and pr.state == "closed" and pr.merge_sha == result.merge_sha and pr.merged_by == "gate"
    assert await forge.list_prs("proto", name) == []
    assert [p.number for p in await forge.list_prs("proto", name, "closed")] == [1]
    with pytest.raises(ForgeError) as exc:
        await forge.merge("gate", "proto", name, 1, sha)
    assert exc.value.status == 405

    fresh = git.clone(info.clone_url, short_tmp / "fresh")
    assert git.head(fresh) == result.merge_sha
    assert (fresh / "kernel.py").exists()


async def test_request_reviewers_and_errors(forge: Forge, quiet_gw: ForgeGateway, short_tmp: Path) -> None:
    name = unique("rr", forge)
    info = await forge.ensure_repo("proto", name)
    git = agent_git(quiet_gw, short_tmp, "bob")
    work = git.clone(info.clone_url, short_tmp / "w")
    git.run("checkout", "-q", "-b", "bob/rr", cwd=work)
    git.commit(work, "x.py", "x\n", "x")
    assert git.push(work, "bob/rr").returncode == 0
    with pytest.raises(ForgeError) as exc:  # agents open PRs only from their own branches
        await forge.open_pr("alice", "proto", name, "bob/rr", "main", "not mine")
    assert exc.value.status == 422
    with pytest.raises(ForgeError) as exc:
        await forge.open_pr("bob", "proto", name, "bob/missing", "main", "nothing pushed")
    assert exc.value.status == 404
    pr = await forge.open_pr("bob", "proto", name, "bob/rr", "main", "x")
    pr = await forge.request_reviewers("bob", "proto", name, pr.number, ["alice", "carol"])
    assert pr.requested_reviewers == ["alice", "carol"]
    with pytest.raises(ForgeError) as exc:
        await forge.get_pr("proto", name, 99)
    assert exc.value.status == 404


def test_gitea_token_creation_needs_the_users_basic_auth(quiet_gw: ForgeGateway) -> None:
    with quiet_gw.gitea(quiet_gw.operator_token) as admin:
        body = {
            "username": "erin",
            "email": "erin@agents.test",
            "password": "s3cret-pw",
            "must_change_password": False,
        }
        assert admin.post("/admin/users", json=body).status_code == 201
        assert admin.post("/admin/users", json=body).status_code == 422
        # an admin token is not the user's Basic auth
        assert admin.post("/users/erin/tokens", json={"name": "t"}).status_code == 401
    url = f"{quiet_gw.url}/api/v1/users/erin/tokens"
    assert httpx.post(url, json={"name": "t"}, auth=("erin", "wrong")).status_code == 401
    reply = httpx.post(url, json={"name": "t", "scopes": ["write:repository"]}, auth=("erin", "s3cret-pw"))
    assert reply.status_code == 201
    with quiet_gw.gitea(reply.json()["sha1"]) as erin:
        assert erin.get("/user").json()["login"] == "erin"
        assert erin.post("/orgs", json={"username": "mine"}).status_code == 403  # not an admin
        assert erin.get("/user", headers={"Sudo": "alice"}).status_code == 403  # no Sudo for users
    search = httpx.get(
        f"{quiet_gw.url}/api/v1/repos/search", headers={"Authorization": f"token {quiet_gw.operator_token}"}
    ).json()
    assert search["ok"] is True and all("clone_url" in r for r in search["data"])


async def test_attack_oversized_titles_bodies_reviews_and_comments_are_refused(
    forge: Forge, quiet_gw: ForgeGateway, short_tmp: Path
) -> None:
    """An agent writes a megabyte into the texts every reader loads whole (the PR page, ``pr_view``, the
    monitor's feed): each is refused with the field named; nothing is opened or recorded."""
    name = unique("big", forge)
    info = await forge.ensure_repo("proto", name)
    git = agent_git(quiet_gw, short_tmp, "bob")
    work = git.clone(info.clone_url, short_tmp / "w")
    git.run("checkout", "-q", "-b", "bob/big", cwd=work)
    git.commit(work, "x.py", "x\n", "x")
    assert git.push(work, "bob/big").returncode == 0
    megabyte = "y" * (1024 * 1024)
    for title, body, status in ((megabyte[:300], "", 422), ("a\nsecond line", "", 422), ("t", megabyte, 413)):
        with pytest.raises(ForgeError) as exc:
            await forge.open_pr("bob", "proto", name, "bob/big", "main", title, body)
        assert exc.value.status == status and exc.value.message.startswith(("title:", "body:"))
    assert await forge.list_prs("proto", name) == []
    pr = await forge.open_pr("bob", "proto", name, "bob/big", "main", "fine", "b" * 60_000)
    with pytest.raises(ForgeError) as exc:
        await forge.comment("alice", "proto", name, pr.number, megabyte)
    assert exc.value.status == 413 and exc.value.message.startswith("comment:")
    with pytest.raises(ForgeError) as exc:
        await forge.review("alice", "proto", name, pr.number, "COMMENT", megabyte)
    assert exc.value.status == 413 and exc.value.message.startswith("review:")
    assert await forge.comments("proto", name, pr.number) == []
