"""Diffs are cut while they are read (issue 23), attacked as a misbehaving agent would: alice pushes,
through the gateway's git over HTTP with her own token, a PR whose diff is megabytes (a 4 MB file just
under the push limit, a file whose diff is twice its size, 300 small kernels), then reads it back
through every path that renders a diff. Each answers at most the cap plus its markers and says it
was cut. Before the caps, the REST view returned 2 MB, ``.diff`` the whole 4.3 MB, ``.patch`` was a
404, MCP ``pr_view`` cut the text blindly (no file was ever named as too large) and the Gitea adapter
read the whole answer into memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from forgekit import ForgeGateway, Swarm, running_gateway
from redis.asyncio import Redis

from gateway.forge.gitea.forge import GiteaForge
from gateway.forge.settings import ForgeSettings
from kstest.mcp_client import call, mcp_session

CAP = 128 * 1024
FILE_CAP = 32 * 1024
MARKERS = 400  # room for the trailing "... diff cut at N bytes; see ..." line
HUGE = 4_000_000  # under the default push limit of 4 MiB per file


@pytest.fixture(scope="module")
def forge_gw(redis_url: str) -> Iterator[ForgeGateway]:
    settings = ForgeSettings(gate_enabled=False, diff_max_bytes=CAP, diff_max_file_bytes=FILE_CAP)
    with running_gateway(redis_url, settings) as gw:
        yield gw


@pytest.fixture(scope="module")
def big_pr(forge_gw: ForgeGateway, tmp_path_factory: pytest.TempPathFactory) -> tuple[Swarm, int]:
    """alice's PR: data/huge.txt (4 MB of text), kernels/t/blank.py (20 KB of empty lines: a 40 KB
    diff from a blob under the per-file cap) and 300 kernels of 1 KB each."""
    with forge_gw.op() as op:
        assert op.post("/api/forge/repos", json={"org": "kswarm", "name": "diffs"}).status_code == 201
    swarm = Swarm(forge_gw, tmp_path_factory.mktemp("diffs"), "kswarm", "diffs", forge_gw.tokens)
    git, repo = swarm.clone("alice")
    git.run("checkout", "-q", "-b", "alice/big", cwd=repo)
    line = "0123456789abcdef" * 4 + "\n"
    (repo / "data").mkdir()
    (repo / "data" / "huge.txt").write_text(line * (HUGE // len(line)))
    (repo / "kernels" / "t").mkdir(parents=True)
    (repo / "kernels" / "t" / "blank.py").write_text("\n" * 20_000)
    for i in range(300):
        (repo / "kernels" / "t" / f"k{i:03}.py").write_text(f"def kernel_{i}(x):\n" + f"    x += {i}\n" * 80)
    git.run("add", "-A", cwd=repo)
    git.run("commit", "-q", "-m", "a big PR", cwd=repo)
    pushed = git.push(repo, "alice/big")
    assert pushed.returncode == 0, pushed.stderr
    return swarm, swarm.open_pr("alice", "alice/big")


def assert_cut(text: str, cap: int, huge_named: bool = True) -> None:
    assert len(text.encode()) <= cap + MARKERS, len(text.encode())
    last = text.rstrip("\n").rsplit("\n", 1)[-1]
    assert last.startswith("... diff cut at "), last
    if huge_named:
        assert "diff --git a/data/huge.txt b/data/huge.txt\n... file diff too large, " in text
        assert "diff --git a/kernels/t/blank.py b/kernels/t/blank.py\n... file diff too large, " in text
        assert "+    x += 7\n" in text  # small files are shown whole


def test_attack_rest_pr_view_diff_is_cut(big_pr: tuple[Swarm, int]) -> None:
    swarm, number = big_pr
    with swarm.gw.client(swarm.tokens["alice"]) as alice:
        reply = alice.get(f"/api/forge/repos/{swarm.full}/pulls/{number}", params={"diff": "true"})
    assert reply.status_code == 200, reply.text
    view = reply.json()
    assert_cut(view["diff"], CAP)
    assert view["diff_truncated"] is True
    assert {"data/huge.txt", "kernels/t/blank.py"} <= set(view["diff_too_large"])
    assert "huge.txt" in view["diff"].split("\n", 1)[0]  # the files come in git's order


@pytest.mark.parametrize("suffix", ["diff", "patch"])
def test_attack_gitea_diff_and_patch_are_cut(big_pr: tuple[Swarm, int], suffix: str) -> None:
    swarm, number = big_pr
    with swarm.api("alice") as api:
        reply = api.get(f"/repos/{swarm.full}/pulls/{number}.{suffix}")
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-kswarm-diff-truncated"] == "true"
    assert_cut(reply.text, CAP)
    if suffix == "patch":
        assert reply.text.startswith("From ") and "Subject: [PATCH] a big PR" in reply.text


def test_pull_files_pages_name_files_without_their_content(big_pr: tuple[Swarm, int]) -> None:
    swarm, number = big_pr
    with swarm.api("alice") as api:
        page = api.get(f"/repos/{swarm.full}/pulls/{number}/files", params={"limit": 50}).json()
    assert len(page) == 50 and page[0]["filename"] == "data/huge.txt"
    assert all(
        set(f) == {"filename", "previous_filename", "status", "additions", "deletions", "changes"}
        for f in page
    )


async def test_attack_mcp_pr_view_names_the_files_it_left_out(big_pr: tuple[Swarm, int]) -> None:
    swarm, number = big_pr
    async with mcp_session(swarm.gw.url, swarm.tokens["alice"]) as alice:
        view: dict[str, Any] = await call(alice, "pr_view", number=number, repo=swarm.full)
    assert view["diff_truncated"] is True
    assert_cut(view["diff"], 20_000, huge_named=False)  # diff_max_chars: the agent's smaller cap
    assert "diff --git a/data/huge.txt b/data/huge.txt\n... file diff too large, " in view["diff"]
    assert "data/huge.txt" in view["diff_too_large"]


@pytest.fixture
async def adapter(forge_gw: ForgeGateway) -> AsyncIterator[GiteaForge]:
    redis = Redis.from_url(forge_gw.redis_url, decode_responses=True)
    impl = GiteaForge(forge_gw.url, forge_gw.operator_token, redis=redis)
    yield impl
    await impl.aclose()
    await redis.aclose()


async def test_attack_gitea_adapter_reads_a_diff_streamed_and_stops(
    big_pr: tuple[Swarm, int], adapter: GiteaForge
) -> None:
    """The adapter against a '.diff' that is cut only by its own smaller caps."""
    swarm, number = big_pr
    cut = await adapter.pr_diff(swarm.org, swarm.repo, number, max_bytes=40_000, max_file_bytes=8_000)
    assert cut.truncated is True
    assert_cut(cut.text, 40_000, huge_named=False)
    assert "diff --git a/data/huge.txt b/data/huge.txt\n... file diff too large, " in cut.text
