"""The default-repo rule (issue 18): the PR tools' default never depends on what else exists. The KB
repo, created by the first ``kb_search``, is never a default, and a repo created later changes
nothing: ``pr_list``/``pr_open`` without ``repo`` keep working on the first work repo."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync
from forgekit import Swarm
from kbkit import KBGateway

from gateway.forge.plugin import ForgePlugin
from gateway.forge.settings import ForgeSettings
from gateway.kb.plugin import KBPlugin
from gateway.kb.service import KBSettings
from gateway.plugin import Plugin
from gateway.tasks.plugin import TasksPlugin
from kstest.mcp_client import call, mcp_session


class LazyKBGateway(KBGateway):
    """The KB is created on its first use (the default), not at start-up."""

    def plugins(self) -> list[Plugin[Any]]:
        return [ForgePlugin(ForgeSettings(gate_sweep_s=0.5)), TasksPlugin(), KBPlugin(KBSettings())]


@pytest.fixture(scope="module")
def lazy_gw(redis_url: str) -> Iterator[LazyKBGateway]:
    client = redis_sync.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    tmp = Path(tempfile.mkdtemp(prefix="kskbd"))
    gw = LazyKBGateway(tmp / "home", redis_url)
    gw.start()
    gw.tokens = {n: gw.add_principal(n) for n in ("alice", "bob")}
    try:
        yield gw
    finally:
        gw.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def default_repo(gw: LazyKBGateway) -> str | None:
    with gw.client(gw.operator_token) as op:
        return op.get("/api/forge/default-repo").json()["repo"]


async def test_the_kb_and_later_repos_never_change_the_default(
    lazy_gw: LazyKBGateway, tmp_path: Path
) -> None:
    with lazy_gw.client(lazy_gw.operator_token) as op:
        assert op.post("/api/forge/repos", json={"org": "kswarm", "name": "kernels"}).status_code == 201
    kernels = Swarm(lazy_gw, tmp_path, "kswarm", "kernels", lazy_gw.tokens)
    kernels.push_branch("alice", "alice/first", "kernels/add/alice.py", "# one\n")
    async with mcp_session(lazy_gw.url, lazy_gw.tokens["alice"]) as alice:
        assert await call(alice, "pr_list") == []
        found = await call(alice, "kb_search", query="mask non-multiple sizes")  # creates kswarm/kb
        assert found["repo"] == "kswarm/kb" and found["results"]
        opened = await call(alice, "pr_open", head="alice/first", title="first", reviewers=["bob"])
        assert opened["repo"] == "kswarm/kernels", opened
        with lazy_gw.client(lazy_gw.operator_token) as op:
            assert op.post("/api/forge/repos", json={"org": "kswarm", "name": "later"}).status_code == 201
        listed = await call(alice, "pr_list")
        assert [(p["repo"], p["number"]) for p in listed] == [("kswarm/kernels", opened["number"])]
    assert default_repo(lazy_gw) == "kswarm/kernels"
    # an operator may name another; an agent may not
    with lazy_gw.client(lazy_gw.tokens["alice"]) as alice_rest:
        assert alice_rest.put("/api/forge/default-repo", json={"repo": "kswarm/later"}).status_code == 403
    with lazy_gw.client(lazy_gw.operator_token) as op:
        assert op.put("/api/forge/default-repo", json={"repo": "kswarm/later"}).status_code == 200
    assert default_repo(lazy_gw) == "kswarm/later"
