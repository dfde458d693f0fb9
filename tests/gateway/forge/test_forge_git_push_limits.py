"""The push limits of the embedded forge (issue 23), attacked as a misbehaving agent would: a real
``git push`` through the gateway with the agent's own token. Each attack was accepted before the
limits existed; an honest push still goes through.

The module's gateway has a small pack limit (so the pack-size attack sends little data) and the
default blob, file and branch limits (4 MiB, 500, 100).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from forgekit import ForgeGateway, Git, Swarm, running_gateway

from gateway.forge.embedded import receive
from gateway.forge.settings import ForgeSettings

PACK_LIMIT = 256 * 1024


@pytest.fixture(scope="module")
def forge_gw(redis_url: str) -> Iterator[ForgeGateway]:
    with running_gateway(redis_url, ForgeSettings(gate_enabled=False, push_max_pack_bytes=PACK_LIMIT)) as gw:
        yield gw


def branch(swarm: Swarm, who: str, name: str) -> tuple[Git, Path]:
    git, repo = swarm.clone(who, f"w-{name.replace('/', '-')}")
    git.run("checkout", "-q", "-b", name, cwd=repo)
    return git, repo


def commit_bytes(git: Git, repo: Path, files: dict[str, bytes], message: str) -> str:
    for path, data in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(data)
    git.run("add", "-A", cwd=repo)
    git.run("commit", "-q", "-m", message, cwd=repo)
    return git.head(repo)


def remote_branches(git: Git, repo: Path) -> list[str]:
    out = git.run("ls-remote", "--heads", "origin", cwd=repo).stdout
    return [line.split("\t")[1] for line in out.splitlines()]


def test_an_honest_push_within_the_limits_is_accepted(swarm: Swarm) -> None:
    git, repo = branch(swarm, "alice", "alice/honest")
    files = {f"kernels/t/k{i}.py": f"x = {i}\n".encode() for i in range(20)}
    files["data/table.bin"] = os.urandom(100 * 1024)  # a modest blob, a modest pack
    sha = commit_bytes(git, repo, files, "an honest change")
    result = git.push(repo, "alice/honest")
    assert result.returncode == 0, result.stderr
    assert git.head(repo, "origin/alice/honest") == sha


def test_attack_a_push_with_a_5mb_file_is_refused_naming_the_limit(swarm: Swarm) -> None:
    git, repo = branch(swarm, "alice", "alice/big")
    commit_bytes(git, repo, {"big.bin": b"\0" * (5 * 1024 * 1024)}, "a 5 MB file")  # a tiny pack
    result = git.push(repo, "alice/big")
    assert result.returncode != 0
    assert "remote: kswarm:   rejected blob" in result.stderr, result.stderr
    assert "(big.bin): 5,242,880 bytes, over the limit of 4,194,304 bytes per file" in result.stderr
    assert "KSWARM_FORGE_PUSH_MAX_BLOB_BYTES" in result.stderr
    assert "refs/heads/alice/big" not in remote_branches(git, repo)


def test_attack_a_push_creating_101_branches_is_refused(swarm: Swarm) -> None:
    git, repo = branch(swarm, "alice", "alice/spray")
    commit_bytes(git, repo, {"k.py": b"x = 1\n"}, "one commit, many branches")
    result = git.push(repo, *(f"HEAD:refs/heads/alice/b{i}" for i in range(101)))
    assert result.returncode != 0
    assert "remote: kswarm:   rejected 101 new branch(es): alice would own 101 branches" in result.stderr
    assert "over the limit of 100 per agent (KSWARM_FORGE_MAX_BRANCHES_PER_AGENT)" in result.stderr
    assert remote_branches(git, repo) == ["refs/heads/main"]
    # the limit counts the branches alice already owns: 100 are fine, one more is not
    result = git.push(repo, *(f"HEAD:refs/heads/alice/b{i}" for i in range(100)))
    assert result.returncode == 0, result.stderr
    result = git.push(repo, "HEAD:refs/heads/alice/one-more")
    assert result.returncode != 0
    assert "1 new branch(es): alice would own 101 branches" in result.stderr, result.stderr
    # deleting one in the same push makes room; other agents have their own count
    result = git.push(repo, ":refs/heads/alice/b0", "HEAD:refs/heads/alice/one-more")
    assert result.returncode == 0, result.stderr
    bob, bob_repo = branch(swarm, "bob", "bob/mine")
    commit_bytes(bob, bob_repo, {"b.py": b"y = 2\n"}, "bob's")
    result = bob.push(bob_repo, "bob/mine")
    assert result.returncode == 0, result.stderr


def test_attack_a_push_changing_501_files_is_refused(swarm: Swarm) -> None:
    git, repo = branch(swarm, "alice", "alice/many")
    commit_bytes(git, repo, {f"f/{i}.txt": f"{i}\n".encode() for i in range(300)}, "300 files")
    commit_bytes(git, repo, {f"g/{i}.txt": f"{i}\n".encode() for i in range(201)}, "201 more")
    result = git.push(repo, "alice/many")
    assert result.returncode != 0
    assert "remote: kswarm:   rejected the pushed commits change 501 files" in result.stderr, result.stderr
    assert "over the limit of 500 per push (KSWARM_FORGE_PUSH_MAX_FILES)" in result.stderr
    assert "refs/heads/alice/many" not in remote_branches(git, repo)


def test_attack_a_corrupt_object_is_refused_by_fsck(swarm: Swarm) -> None:
    """A commit git itself would never write (a date that is no number), hand-made with
    ``hash-object --literally``: ``receive.fsckObjects`` refuses it before any hook sees it."""
    git, repo = branch(swarm, "alice", "alice/corrupt")
    tree = git.run("rev-parse", "HEAD^{tree}", cwd=repo).stdout.strip()
    parent = git.head(repo)
    who = f"alice <{git.email}>"
    body = (
        f"tree {tree}\nparent {parent}\n"
        f"author {who} yesterday +0000\ncommitter {who} 1700000000 +0000\n\nbad\n"
    )
    (repo / "commit.txt").write_text(body)
    sha = git.run("hash-object", "--literally", "-t", "commit", "-w", "commit.txt", cwd=repo).stdout.strip()
    result = git.push(repo, f"{sha}:refs/heads/alice/corrupt")
    assert result.returncode != 0
    assert "badDate" in result.stderr, result.stderr
    assert "refs/heads/alice/corrupt" not in remote_branches(git, repo)


def test_attack_a_push_over_the_pack_limit_is_refused(swarm: Swarm) -> None:
    git, repo = branch(swarm, "alice", "alice/pack")
    commit_bytes(git, repo, {"noise.bin": os.urandom(2 * PACK_LIMIT)}, "an incompressible file")
    result = git.push(repo, "alice/pack")
    assert result.returncode != 0
    assert "pack exceeds maximum allowed size" in result.stderr, result.stderr
    assert "refs/heads/alice/pack" not in remote_branches(git, repo)


def test_the_limits_reach_the_hook_and_operators_are_exempt(monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``git http-backend`` gets per push: git's pack limit and object check as config
    parameters, the hook's limits as variables; an operator gets the object check only. A hook run
    without the variables (or with garbage in them) falls back to the defaults, never to no limit."""
    settings = ForgeSettings(push_max_pack_bytes=1000, push_max_blob_bytes=10, push_max_files=3)
    agent = settings.push_env("agent")
    config = {agent[f"GIT_CONFIG_KEY_{i}"]: agent[f"GIT_CONFIG_VALUE_{i}"] for i in range(2)}
    assert agent["GIT_CONFIG_COUNT"] == "2"
    assert config == {"receive.fsckObjects": "true", "receive.maxInputSize": "1000"}
    assert (agent["KSWARM_MAX_BLOB_BYTES"], agent["KSWARM_MAX_FILES"]) == ("10", "3")
    assert agent["KSWARM_MAX_BRANCHES"] == "100"
    operator = settings.push_env("operator")
    assert operator["GIT_CONFIG_COUNT"] == "1" and operator["GIT_CONFIG_KEY_0"] == "receive.fsckObjects"
    assert {operator[v] for v in ("KSWARM_MAX_BLOB_BYTES", "KSWARM_MAX_FILES", "KSWARM_MAX_BRANCHES")} == {
        "0"
    }
    assert receive.check_limits([(receive.ZERO, "1" * 40, "refs/heads/x/y")], "x", "operator") == []
    monkeypatch.delenv("KSWARM_MAX_BLOB_BYTES", raising=False)
    monkeypatch.setenv("KSWARM_MAX_FILES", "lots")
    assert (receive.limit("KSWARM_MAX_BLOB_BYTES"), receive.limit("KSWARM_MAX_FILES")) == (
        4 * 1024 * 1024,
        500,
    )
    defaults = ForgeSettings()
    assert (defaults.push_max_blob_bytes, defaults.push_max_files, defaults.max_branches_per_agent) == (
        receive.LIMITS["KSWARM_MAX_BLOB_BYTES"][0],
        receive.LIMITS["KSWARM_MAX_FILES"][0],
        receive.LIMITS["KSWARM_MAX_BRANCHES"][0],
    )
