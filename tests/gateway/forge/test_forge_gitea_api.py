"""The embedded forge's Gitea-shaped API says what Gitea says: its review words and their refusals, the
same ``mergeable`` in a list as in the single view, ``merged_at``/``closed_at``, ``{"message","url"}``
errors, ``ServerVersion``, and the content APIs (contents, trees, blobs, change-files) with Gitea's
per-file rules — checked with plain HTTP, as any Gitea client would see it."""

from __future__ import annotations

import base64
import re
import uuid
from pathlib import Path

import httpx
from forgekit import ForgeGateway, Git, Swarm


def new_repo(gw: ForgeGateway, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with gw.op() as op:
        assert (
            op.post("/api/forge/repos", json={"org": "api", "name": name, "default": False}).status_code
            == 201
        )
    return f"api/{name}"


def pushed(gw: ForgeGateway, tmp: Path, repo: str, who: str, branch: str, files: dict[str, str]) -> str:
    git = Git(tmp / f"h-{who}", gw.tokens[who], who, f"{who}@agents.{gw.swarm}")
    work = git.clone(f"{gw.url}/git/{repo}.git", tmp / f"w-{branch.replace('/', '-')}")
    git.run("checkout", "-q", "-b", branch, cwd=work)
    for path, text in files.items():
        sha = git.commit(work, path, text, f"{path}")
    assert git.push(work, branch).returncode == 0
    return sha


def test_version_and_error_shapes(quiet_gw: ForgeGateway) -> None:
    with quiet_gw.gitea(quiet_gw.tokens["alice"]) as api:
        version = api.get("/version").json()
        assert set(version) == {"version"} and re.match(r"^\d+\.\d+\.\d+", version["version"])
        missing = api.get("/repos/api/does-not-exist")
    assert missing.status_code == 404 and set(missing.json()) == {"message", "url"}
    for headers in ({}, {"Authorization": "token ksw_forged"}):
        reply = httpx.get(f"{quiet_gw.url}/api/v1/user", headers=headers)
        assert reply.status_code == 401 and set(reply.json()) == {"message", "url"}, reply.text


def test_review_words_are_giteas(quiet_gw: ForgeGateway, short_tmp: Path) -> None:
    repo = new_repo(quiet_gw, "rev")
    sha = pushed(quiet_gw, short_tmp, repo, "alice", "alice/rev", {"k.py": "k\n"})
    with quiet_gw.gitea(quiet_gw.tokens["alice"]) as alice:
        number = alice.post(
            f"/repos/{repo}/pulls", json={"head": "alice/rev", "base": "main", "title": "t"}
        ).json()["number"]
    path = f"/repos/{repo}/pulls/{number}/reviews"
    with quiet_gw.gitea(quiet_gw.tokens["bob"]) as bob:
        # GitHub's APPROVE is no approval in Gitea: without a body it is refused in Gitea's words ...
        refused = bob.post(path, json={"event": "APPROVE"})
        assert (
            refused.status_code == 422 and refused.json()["message"] == "review event APPROVE requires a body"
        )
        # ... and with one it is a PENDING review, which the gate never counts
        pending = bob.post(path, json={"event": "APPROVE", "body": "lgtm"})
        assert pending.status_code == 200 and pending.json()["state"] == "PENDING"
        assert bob.post(path, json={"event": "COMMENT"}).json()["message"] == (
            "review event COMMENT requires a body or a comment"
        )
        assert bob.post(path, json={"event": "REQUEST_CHANGES"}).status_code == 422
        assert [r["state"] for r in bob.get(path).json()] == ["PENDING"], (
            "the reviewer sees their pending one"
        )
    with quiet_gw.gitea(quiet_gw.tokens["carol"]) as carol:
        assert carol.get(path).json() == [], "a pending review is nobody else's business"
    with quiet_gw.gitea(quiet_gw.tokens["alice"]) as alice:
        own = alice.post(path, json={"event": "APPROVED"})
        assert own.status_code == 422 and own.json()["message"] == "approve your own pull is not allowed"
        own = alice.post(path, json={"event": "REQUEST_CHANGES", "body": "no"})
        assert own.json()["message"] == "reject your own pull is not allowed"
    with quiet_gw.op() as op:
        view = op.get(f"/api/forge/repos/{repo}/pulls/{number}").json()
    assert view["gate"]["approvals"] == [] and "approvals" in {r["code"] for r in view["gate"]["reasons"]}
    with quiet_gw.gitea(quiet_gw.tokens["bob"]) as bob:
        approved = bob.post(path, json={"event": "APPROVED", "commit_id": sha})
        assert approved.status_code == 200 and approved.json()["state"] == "APPROVED"
        assert approved.json()["commit_id"] == sha and approved.json()["official"] is True
        # Gitea records a review on any commit it is given: stale, never counted (no 409 here)
        old = bob.post(path, json={"event": "APPROVED", "commit_id": "f" * 40})
        assert old.status_code == 200 and old.json()["stale"] is True


def test_list_and_single_view_agree_and_merged_prs_say_when(quiet_gw: ForgeGateway, short_tmp: Path) -> None:
    repo = new_repo(quiet_gw, "merge")
    sha = pushed(quiet_gw, short_tmp, repo, "alice", "alice/m", {"k.py": "k\n"})
    with quiet_gw.gitea(quiet_gw.tokens["alice"]) as alice:
        created = alice.post(f"/repos/{repo}/pulls", json={"head": "alice/m", "base": "main", "title": "m"})
    number = created.json()["number"]
    with quiet_gw.gitea(quiet_gw.operator_token) as admin:
        single = admin.get(f"/repos/{repo}/pulls/{number}").json()
        listed = admin.get(f"/repos/{repo}/pulls", params={"state": "open"}).json()
        assert [p["mergeable"] for p in listed] == [single["mergeable"]] == [True]
        assert single["merged_at"] is None and single["closed_at"] is None and single["merged"] is False
        assert admin.get(f"/repos/{repo}/pulls", params={"state": "bogus"}).status_code == 422
    with quiet_gw.gitea(quiet_gw.tokens["bob"]) as bob:
        bob.post(f"/repos/{repo}/pulls/{number}/reviews", json={"event": "APPROVED"}).raise_for_status()
    with quiet_gw.gitea(quiet_gw.operator_token) as admin:  # an admin acting as the gate, which merges
        merged = admin.post(
            f"/repos/{repo}/pulls/{number}/merge",
            json={"Do": "merge", "head_commit_id": sha},
            headers={"Sudo": "gate"},
        )
    assert merged.status_code == 200, merged.text
    with quiet_gw.gitea(quiet_gw.operator_token) as admin:
        done = admin.get(f"/repos/{repo}/pulls/{number}").json()
        closed = admin.get(f"/repos/{repo}/pulls", params={"state": "closed"}).json()
    assert done["merged"] and done["merged_at"] and done["closed_at"] and done["state"] == "closed"
    assert done["merged_by"]["login"] == "gate" and done["merge_commit_sha"]
    assert [(p["number"], p["merged_at"]) for p in closed] == [(number, done["merged_at"])]


def test_contents_trees_blobs_and_change_files(quiet_gw: ForgeGateway, short_tmp: Path) -> None:
    repo = new_repo(quiet_gw, "files")
    with quiet_gw.gitea(quiet_gw.tokens["alice"]) as alice:
        root = alice.get(f"/repos/{repo}/contents").json()
        assert [(e["name"], e["type"], e["content"]) for e in root] == [("README.md", "file", None)]
        readme = alice.get(f"/repos/{repo}/contents/README.md", params={"ref": "main"}).json()
        assert readme["encoding"] == "base64" and base64.b64decode(readme["content"]).startswith(b"# ")
        b64 = base64.b64encode
        body = {
            "branch": "main",
            "new_branch": "alice/files",
            "message": "two files",
            "files": [
                {"operation": "create", "path": "d/a.md", "content": b64(b"a\n").decode()},
                {
                    "operation": "update",
                    "path": "README.md",
                    "content": b64(b"# mine\n").decode(),
                    "sha": readme["sha"],
                },
            ],
        }
        made = alice.post(f"/repos/{repo}/contents", json=body)
        assert made.status_code == 201, made.text
        commit = made.json()["commit"]
        assert {f["path"] for f in made.json()["files"]} == {"d/a.md", "README.md"} and len(
            commit["sha"]
        ) == 40
        assert commit["author"]["email"] == f"alice@agents.{quiet_gw.swarm}"
        taken = alice.post(f"/repos/{repo}/contents", json=body)
        assert taken.status_code == 422 and "already exists" in taken.json()["message"]

        # Gitea's per-file rules, against the new branch's head
        def change(op: dict) -> httpx.Response:
            return alice.post(f"/repos/{repo}/contents", json={"branch": "alice/files", "files": [op]})

        assert change({"operation": "create", "path": "d/a.md", "content": "eA=="}).status_code == 422
        assert change({"operation": "update", "path": "d/a.md", "content": "eA=="}).status_code == 422
        assert (
            change({"operation": "update", "path": "d/a.md", "content": "eA==", "sha": "0" * 40}).status_code
            == 422
        )
        assert change({"operation": "delete", "path": "d/none.md", "sha": "0" * 40}).status_code == 404
        assert change({"operation": "create", "path": "d/b.md", "content": "not base64!"}).status_code == 422
        forged = {"branch": "alice/files", "author": {"name": "bob", "email": "bob@agents.test"},
                  "files": [{"operation": "create", "path": "d/c.md", "content": "eA=="}]}  # fmt: skip
        assert alice.post(f"/repos/{repo}/contents", json=forged).status_code == 422, "no commits as another"
        assert alice.post(f"/repos/{repo}/contents", json={"files": [{"operation": "create", "path": "x",
                          "content": "eA=="}]}).status_code == 403, "main is protected"  # fmt: skip
        listing = alice.get(f"/repos/{repo}/contents/d", params={"ref": "alice/files"}).json()
        assert [(e["path"], e["type"]) for e in listing] == [("d/a.md", "file")]
        assert alice.get(f"/repos/{repo}/contents/d/zz.md", params={"ref": "alice/files"}).status_code == 404
        branch = alice.get(f"/repos/{repo}/branches/alice/files").json()
        assert branch["commit"]["id"] == commit["sha"] and branch["protected"] is False
        assert alice.get(f"/repos/{repo}/branches/main").json()["protected"] is True
        tree = alice.get(f"/repos/{repo}/git/trees/{commit['sha']}", params={"recursive": "true"}).json()
        paths = {(e["path"], e["type"]) for e in tree["tree"]}
        assert (
            paths == {("README.md", "blob"), ("d", "tree"), ("d/a.md", "blob")} and tree["total_count"] == 3
        )
        paged = alice.get(
            f"/repos/{repo}/git/trees/{commit['sha']}", params={"recursive": "true", "per_page": 2, "page": 1}
        ).json()
        assert len(paged["tree"]) == 2 and paged["truncated"] is True
        blob_sha = next(e["sha"] for e in tree["tree"] if e["path"] == "d/a.md")
        blob = alice.get(f"/repos/{repo}/git/blobs/{blob_sha}").json()
        assert base64.b64decode(blob["content"]) == b"a\n" and blob["size"] == 2
        got = alice.get(f"/repos/{repo}/git/commits/{commit['sha']}").json()
        assert got["sha"] == commit["sha"] and len(got["parents"]) == 1


def test_org_and_repo_shapes(swarm: Swarm) -> None:
    with swarm.api("operator") as admin:
        org = admin.get(f"/orgs/{swarm.org}").json()
        assert org["username"] == swarm.org and "login" not in org
        assert admin.post("/orgs", json={"username": swarm.org}).status_code == 422
        repo = admin.get(f"/repos/{swarm.full}").json()
        assert repo["full_name"] == swarm.full and repo["clone_url"].endswith(f"/git/{swarm.full}.git")
        protection = admin.get(f"/repos/{swarm.full}/branch_protections/main").json()
    assert protection["enable_push"] and protection["push_whitelist_usernames"] == ["gate"]
    assert protection["merge_whitelist_usernames"] == ["gate"]
    assert not any(k.startswith("kswarm_") for k in protection), "Gitea has no such fields"
