"""The Forge protocol's repository content, on both implementations (``forge`` fixture, conftest.py):
refs, commits, files and trees at a ref, server-side commits with the push rules, and seeding a
protected branch only while it holds its initial commit. The KB, the task seeding and definitions and
the job runner use nothing else, so passing here on ``gitea`` is what makes them work on Gitea.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from forgekit import ForgeGateway, Git
from redis.asyncio import Redis

from gateway.errors import ForgeError
from gateway.forge.gate.policy import ReviewPolicy
from gateway.forge.protocol import Forge
from gateway.forge.seed import seed_branch


def unique(prefix: str, forge: Forge) -> str:
    return f"{prefix}-{forge.kind[0]}{uuid.uuid4().hex[:8]}"


async def status_of(call: object) -> int:
    try:
        await call  # type: ignore[misc]
    except ForgeError as exc:
        return exc.status
    return 200


async def test_refs_commits_files_and_trees(forge: Forge, quiet_gw: ForgeGateway, short_tmp: Path) -> None:
    name = unique("content", forge)
    info = await forge.ensure_repo("proto", name)
    head = await forge.resolve_ref("proto", name, "main")
    assert head is not None and len(head) == 40
    initial = await forge.get_commit("proto", name, head)
    assert initial.sha == head and initial.parents == [], "a new repo's main holds only its initial commit"
    readme = await forge.read_file("proto", name, "main", "README.md")
    assert readme is not None and readme.content.startswith(b"# ") and len(readme.sha) == 40
    assert await forge.read_file("proto", name, head, "missing.md") is None
    assert await forge.resolve_ref("proto", name, "no-such-branch") is None
    assert await forge.resolve_ref("proto", name, head) == head
    assert await forge.commit_reachable("proto", name, head), "main contains its head"
    assert not await forge.commit_reachable("proto", name, "0" * 40), "a commit the forge does not have"
    assert await status_of(forge.resolve_ref("proto", f"absent-{name}", "main")) == 404
    assert await status_of(forge.read_file("proto", name, "no-such-branch", "README.md")) == 404

    # an agent pushes a branch; reading at its head, and a branch named like a sha prefix, resolve
    git = Git(short_tmp / "h", quiet_gw.tokens["alice"], "alice", f"alice@agents.{quiet_gw.swarm}")
    work = git.clone(info.clone_url, short_tmp / "w")
    git.run("checkout", "-q", "-b", "alice/notes", cwd=work)
    git.commit(work, "notes/a.md", "# A\n\nalpha\n", "a")
    git.commit(work, "notes/deep/b.md", "# B\n\nbeta\n", "b")
    git.commit(work, "notes/c.txt", "gamma, longer\n", "c")
    sha = git.commit(work, "code/x.py", "x = 1\n", "x")
    assert git.push(work, "alice/notes").returncode == 0
    assert await forge.resolve_ref("proto", name, "alice/notes") == sha
    assert await forge.read_file("proto", name, "alice/notes", "notes") is None, "a directory is no file"
    notes = await forge.read_tree("proto", name, sha, prefix="notes/", suffixes=(".md",))
    assert {(f.path, f.content) for f in notes} == {
        ("notes/a.md", b"# A\n\nalpha\n"),
        ("notes/deep/b.md", b"# B\n\nbeta\n"),
    }
    everything = {f.path for f in await forge.read_tree("proto", name, sha)}
    assert {"README.md", "notes/c.txt", "code/x.py", "notes/a.md"} <= everything
    assert [f.path for f in await forge.read_tree("proto", name, sha, max_bytes=6)] == ["code/x.py"]
    # max_bytes: a larger file comes with its size and blob sha, never its content (a diff's per-file cap)
    big = await forge.read_file("proto", name, sha, "notes/c.txt", max_bytes=6)
    assert big is not None and (big.size, big.content, len(big.sha)) == (14, b"", 40)
    small = await forge.read_file("proto", name, sha, "code/x.py", max_bytes=6)
    assert small is not None and small.content == b"x = 1\n"
    top = await forge.read_file("proto", name, sha, "README.md", max_bytes=1)
    assert top is not None and top.content == b"" and top.size > 1
    assert await forge.read_tree("proto", name, "main", prefix="notes/") == [], "main has no notes yet"
    commit = await forge.get_commit("proto", name, sha)
    assert commit.author_email == f"alice@agents.{quiet_gw.swarm}" and len(commit.parents) == 1


async def test_commit_files_follows_the_push_rules(forge: Forge, quiet_gw: ForgeGateway) -> None:
    name = unique("commit", forge)
    await forge.ensure_repo("proto", name)  # main is protected from the start
    head = await forge.resolve_ref("proto", name, "main")
    assert head is not None
    files = {"tasks/t/task.py": b"NAME = 't'\n", "README.md": b"# seeded\n"}
    # nobody but the gate writes a protected branch: not an agent, not even an operator
    for actor in ("alice", "operator"):
        assert await status_of(forge.commit_files(actor, "proto", name, "main", files, "m")) == 403, actor
    # an agent writes only under its own name
    assert (
        await status_of(forge.commit_files("alice", "proto", name, "main", files, "m", new_branch="bob/x"))
        == 403
    )
    made = await forge.commit_files("alice", "proto", name, "main", files, "alice's", new_branch="alice/x")
    assert await forge.resolve_ref("proto", name, "alice/x") == made
    assert await forge.resolve_ref("proto", name, "main") == head, "main did not move"
    mine = await forge.get_commit("proto", name, made)
    assert (mine.parents, mine.author_email) == ([head], f"alice@agents.{quiet_gw.swarm}")
    assert (
        await status_of(forge.commit_files("alice", "proto", name, "main", files, "m", new_branch="alice/x"))
        == 422
    )
    # the gate writes main, by compare-and-swap on the head it was given
    gated = await forge.commit_files("gate", "proto", name, "main", files, "seed", expected_head=head)
    assert (await forge.get_commit("proto", name, gated)).author_email == f"gate@bots.{quiet_gw.swarm}"
    stale = forge.commit_files("gate", "proto", name, "main", {"x.md": b"x"}, "late", expected_head=head)
    assert await status_of(stale) == 409
    task = await forge.read_file("proto", name, "main", "tasks/t/task.py")
    assert task is not None and task.content == b"NAME = 't'\n"
    # deletions, a missing path, paths that leave the tree
    gone = await forge.commit_files("gate", "proto", name, "main", {"README.md": None}, "rm")
    assert await forge.read_file("proto", name, gone, "README.md") is None
    assert await status_of(forge.commit_files("gate", "proto", name, "main", {"nope.md": None}, "rm")) == 404
    for bad in ("../escape", "/abs", "a/../../b", ".git/config", "a//b"):
        assert await status_of(forge.commit_files("gate", "proto", name, "main", {bad: b"x"}, "m")) in (
            403,
            422,
        ), bad
    # the gate's writes are still subject to nothing else: an unprotected branch takes anyone's
    await forge.protect_branch("proto", name, "release", ReviewPolicy())
    assert (
        await status_of(
            forge.commit_files("operator", "proto", name, "main", {"y": b"y"}, "m", new_branch="release")
        )
        == 403
    )


async def test_seed_only_while_the_branch_holds_its_initial_commit(
    forge: Forge, quiet_gw: ForgeGateway
) -> None:
    name = unique("seed", forge)
    await forge.ensure_repo("proto", name)
    redis = Redis.from_url(quiet_gw.redis_url, decode_responses=True)
    try:
        files = {f"notes/n{i}.md": f"# note {i}\n".encode() for i in range(3)}
        # racing seeders: exactly one commit lands, the others see history and do nothing
        results = await asyncio.gather(
            *(seed_branch(forge, redis, "proto", name, "main", files, "seed\n") for _ in range(4))
        )
        landed = [r for r in results if r]
        assert len(landed) == 1, results
        head = await forge.resolve_ref("proto", name, "main")
        assert head == landed[0]
        assert len((await forge.get_commit("proto", name, head)).parents) == 1
        assert await seed_branch(forge, redis, "proto", name, "main", {"x.md": b"x"}, "again\n") is None
        assert await forge.resolve_ref("proto", name, "main") == head, "reviewed history is never reseeded"
        assert {f.path for f in await forge.read_tree("proto", name, "main", prefix="notes/")} == set(files)
    finally:
        await redis.aclose()
