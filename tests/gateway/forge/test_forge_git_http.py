"""Git smart HTTP and the receive check, with the real git CLI against a real gateway."""

from __future__ import annotations

import gzip

import httpx
from forgekit import Swarm


def test_clone_needs_a_valid_token(swarm: Swarm) -> None:
    git = swarm.git("alice")
    git.token = "ksw_not-a-token"
    result = git.run("clone", "-q", swarm.repo_url, str(swarm.tmp / "bad"), check=False)
    assert result.returncode != 0
    assert "Authentication failed" in result.stderr or "401" in result.stderr
    anonymous = httpx.get(f"{swarm.repo_url}/info/refs?service=git-upload-pack")
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Basic")


def test_refusals_are_the_gateways_errors_with_their_code(swarm: Swarm) -> None:
    """The smart-HTTP route refuses with the shared errors: the one handler's body and code, git's
    Basic challenge on a 401, and no repository named by the caller answered as anything but a 404."""
    anonymous = httpx.get(f"{swarm.repo_url}/info/refs?service=git-upload-pack")
    forged = httpx.get(f"{swarm.repo_url}/info/refs", auth=("x", "ksw_forged"))
    assert (anonymous.status_code, forged.status_code) == (401, 401)
    assert anonymous.json() == {
        "detail": "authentication required: the token is the password",
        "code": "unauthorized",
    }
    assert forged.json() == {"detail": "invalid or revoked token", "code": "unauthorized"}
    assert forged.headers["www-authenticate"] == 'Basic realm="kswarm git"'
    auth = ("alice", swarm.tokens["alice"])
    nowhere = httpx.get(f"{swarm.gw.url}/git/kswarm/nowhere.git/info/refs", auth=auth)
    dumb = httpx.get(f"{swarm.repo_url}/HEAD", auth=auth)  # the dumb protocol is not served
    assert nowhere.status_code == 404
    assert nowhere.json() == {"detail": "no repository kswarm/nowhere", "code": "not_found"}
    assert dumb.status_code == 404
    assert dumb.json() == {"detail": "only git smart HTTP is served here", "code": "not_found"}


def test_clone_and_push_own_branch(swarm: Swarm) -> None:
    git, repo = swarm.clone("alice")
    assert (repo / "README.md").exists()
    git.run("checkout", "-q", "-b", "alice/feature", cwd=repo)
    sha = git.commit(repo, "k.py", "x = 1\n", "add kernel")
    result = git.push(repo, "alice/feature")
    assert result.returncode == 0, result.stderr
    # a fresh clone by another agent sees it, authored by alice
    bob, fresh = swarm.clone("bob")
    bob.run("fetch", "-q", "origin", cwd=fresh)
    assert bob.head(fresh, "origin/alice/feature") == sha
    log = bob.run("log", "-1", "--format=%an <%ae>", "origin/alice/feature", cwd=fresh).stdout.strip()
    assert log == "alice <alice@agents.test>"


def test_bearer_auth_works_too(swarm: Swarm) -> None:
    git = swarm.git("bob")
    git.token = "unused"
    header = f"http.extraHeader=Authorization: Bearer {swarm.tokens['bob']}"
    git.run("-c", header, "clone", "-q", swarm.repo_url, str(swarm.tmp / "bearer"))
    assert (swarm.tmp / "bearer" / "README.md").exists()


def test_spoofed_author_rejected_naming_the_commit(swarm: Swarm) -> None:
    git, repo = swarm.clone("alice")
    git.run("checkout", "-q", "-b", "alice/spoof", cwd=repo)
    # --author
    sha = git.commit(repo, "a.py", "a\n", "spoof", "--author=bob <bob@agents.test>")
    result = git.push(repo, "alice/spoof")
    assert result.returncode != 0
    assert f"commit {sha[:10]}" in result.stderr
    assert "author e-mail <bob@agents.test> is not the pusher's <alice@agents.test>" in result.stderr
    # GIT_AUTHOR_* / GIT_COMMITTER_* in the environment
    git.run("reset", "-q", "--hard", "origin/main", cwd=repo)
    sha = git.commit(repo, "b.py", "b\n", "env spoof", GIT_COMMITTER_EMAIL="carol@agents.test")
    result = git.push(repo, "alice/spoof")
    assert result.returncode != 0
    assert f"commit {sha[:10]}" in result.stderr and "committer e-mail <carol@agents.test>" in result.stderr
    # -c user.email
    git.run("reset", "-q", "--hard", "origin/main", cwd=repo)
    (repo / "c.py").write_text("c\n")
    git.run("add", "c.py", cwd=repo)
    git.run("-c", "user.email=mallory@evil.example", "commit", "-q", "-m", "config spoof", cwd=repo)
    result = git.push(repo, "alice/spoof")
    assert result.returncode != 0 and "<mallory@evil.example>" in result.stderr
    # nothing of it landed
    assert "alice/spoof" not in git.run("ls-remote", "origin", cwd=repo).stdout


def test_push_to_main_rejected(swarm: Swarm) -> None:
    git, repo = swarm.clone("alice")
    git.commit(repo, "m.py", "m\n", "straight to main")
    result = git.push(repo, "main")
    assert result.returncode != 0
    assert "main is protected; only the review gate merges into it" in result.stderr
    # operators are not exempt either
    op_token = swarm.gw.operator_token
    op_git = swarm.git("alice")
    op_git.token, op_git.name, op_git.email = op_token, "operator", "operator@operators.test"
    op_git.run("commit", "-q", "--amend", "--reset-author", "--no-edit", cwd=repo)
    assert op_git.push(repo, "main").returncode != 0


def test_push_into_another_agents_namespace_rejected(swarm: Swarm) -> None:
    bob, bob_repo = swarm.clone("bob")
    bob.run("checkout", "-q", "-b", "bob/work", cwd=bob_repo)
    bob.commit(bob_repo, "b.py", "b\n", "bob's work")
    assert bob.push(bob_repo, "bob/work").returncode == 0
    git, repo = swarm.clone("alice")
    git.run("checkout", "-q", "-b", "bob/work", cwd=repo)
    git.commit(repo, "x.py", "x\n", "sneak in")
    result = git.push(repo, "+bob/work")  # forced, so that the client does not refuse it first
    assert result.returncode != 0
    assert "agent alice may push only under refs/heads/alice/" in result.stderr
    result = git.push(repo, "HEAD:refs/heads/shared")
    assert result.returncode != 0 and "refs/heads/shared" in result.stderr


def test_force_push_own_branch_allowed_but_not_others(swarm: Swarm) -> None:
    git, repo = swarm.clone("alice")
    git.run("checkout", "-q", "-b", "alice/f", cwd=repo)
    git.commit(repo, "f.py", "1\n", "one")
    assert git.push(repo, "alice/f").returncode == 0
    git.run("commit", "-q", "--amend", "-m", "one, amended", cwd=repo)
    assert git.push(repo, "+alice/f").returncode == 0  # rewriting your own branch is fine
    # an operator may push to unprotected branches, but may not rewrite alice's
    op = swarm.git("alice")
    op.token, op.name, op.email = swarm.gw.operator_token, "operator", "operator@operators.test"
    op.run("reset", "-q", "--hard", "origin/main", cwd=repo)
    op.commit(repo, "o.py", "o\n", "operator's rewrite")
    result = op.push(repo, "+HEAD:alice/f")
    assert (
        result.returncode != 0 and "non-fast-forward update of a ref operator does not own" in result.stderr
    )


def test_gzip_request_body_is_inflated(swarm: Swarm) -> None:
    refs = httpx.get(
        f"{swarm.repo_url}/info/refs?service=git-upload-pack",
        headers={"Authorization": f"Bearer {swarm.tokens['alice']}"},
    )
    assert refs.status_code == 200
    main = next(line for line in refs.text.splitlines() if "refs/heads/main" in line)
    sha = main.split()[0][-40:]  # "<pkt-len><sha> refs/heads/main"
    body = f"0032want {sha}\n00000009done\n".encode()
    reply = httpx.post(
        f"{swarm.repo_url}/git-upload-pack",
        content=gzip.compress(body),
        headers={
            "Authorization": f"Bearer {swarm.tokens['alice']}",
            "Content-Type": "application/x-git-upload-pack-request",
            "Content-Encoding": "gzip",
        },
    )
    assert reply.status_code == 200
    assert reply.content.startswith(b"0008NAK\n")
    assert b"PACK" in reply.content
