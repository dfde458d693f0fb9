"""Where the agent's git reaches the forge (``agents/tools/git_remote.py``): the preset URL, the
gateway's own ``/git`` over TCP, or a loopback bridge to the gateway's socket that adds no credential."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agents.tools.git_remote import GitRemote
from kstest.gateway import GatewayThread


@pytest.fixture
def gateway(clean_redis: str, short_tmp: Path) -> Iterator[GatewayThread]:
    gw = GatewayThread(short_tmp / "gw", clean_redis)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


async def test_a_preset_url_wins_and_tcp_is_the_gateways_own_git() -> None:
    preset = GitRemote({"KSWARM_GIT_URL": "http://127.0.0.1:1/git", "KSWARM_GATEWAY_URL": "http://x"})
    assert await preset.url() == "http://127.0.0.1:1/git"
    tcp = GitRemote({"KSWARM_GATEWAY_URL": "http://127.0.0.1:8765/", "KSWARM_GATEWAY_SOCKET": "/nowhere"})
    assert await tcp.url() == "http://127.0.0.1:8765/git"
    assert await GitRemote({}).url() is None


async def test_the_socket_bridge_carries_git_but_no_credential(gateway: GatewayThread) -> None:
    """Any local process may connect to the bridge: it must get exactly what it would get from the
    gateway itself, i.e. a 401 without a token of its own."""
    token = gateway.add_principal("alice")
    remote = GitRemote({"KSWARM_GATEWAY_SOCKET": str(gateway.socket_path)})
    url = await remote.url()
    try:
        assert url is not None and url.startswith("http://127.0.0.1:") and url.endswith("/git")
        assert await remote.url() == url  # one bridge per agent
        refs = f"{url}/test/kernels.git/info/refs?service=git-upload-pack"
        async with httpx.AsyncClient(timeout=30) as client:
            anonymous = await client.get(refs)
            assert anonymous.status_code == 401, anonymous.text
            basic = base64.b64encode(f"alice:{token}".encode()).decode()
            mine = await client.get(refs, headers={"Authorization": f"Basic {basic}"})
            assert mine.status_code != 401, mine.text  # the agent's own token is what authenticates
    finally:
        await remote.aclose()
