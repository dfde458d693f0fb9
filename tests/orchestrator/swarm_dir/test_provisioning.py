"""Per-agent provisioning: identity, token, git config and credential helper, dirs, memory banner."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import pytest

from gateway.client.http import GatewayClient, GatewayTarget
from kstest.gateway import GatewayProcess
from orchestrator.spec import parse_spec
from orchestrator.swarm_dir.provision import SwarmLayout, allocate_uid, provision


@pytest.fixture
def setup(gateway: GatewayProcess, short_tmp: Path):
    spec = parse_spec("swarm: forge\nagents:\n  - name: dev-1\n    role: developer\n  - name: rev\n")
    layout = SwarmLayout(short_tmp / "h")
    client = GatewayClient(GatewayTarget(token=gateway.operator_token, url=gateway.url))
    yield spec, layout, client, gateway
    client.close()


def me(gateway: GatewayProcess, token: str) -> httpx.Response:
    return httpx.get(f"{gateway.url}/api/me", headers={"Authorization": f"Bearer {token}"})


def test_provision_creates_identity_dirs_banner_and_git_config(setup) -> None:
    spec, layout, client, gateway = setup
    agent = spec.expand()[0]
    token = provision(client, layout, agent, spec.swarm, None)
    assert me(gateway, token).json() == {"name": "dev-1", "kind": "agent", "email": "dev-1@agents.forge"}
    data = layout.agent_data("dev-1")
    for which in ("home", "work", "memory", "history"):
        assert (data / which).is_dir() and ((data / which).stat().st_mode & 0o777) == 0o700
    assert (data / "memory" / "MEMORY.md").read_text().startswith("# Memory of dev-1\n\nYou are **dev-1**")
    assert (layout.token_file("dev-1").stat().st_mode & 0o777) == 0o600

    env = {
        "HOME": str(data / "home"),
        "GIT_CONFIG_GLOBAL": str(data / "home" / ".gitconfig"),
        "KSWARM_TOKEN_FILE": str(layout.token_file("dev-1")),
        "PATH": "/usr/bin:/bin",
    }
    git = ["git", "-C", str(data / "work")]
    subprocess.run([*git, "init", "-q"], env=env, check=True)
    assert (
        subprocess.run([*git, "config", "user.name"], env=env, capture_output=True, text=True).stdout
        == "dev-1\n"
    )
    email = subprocess.run([*git, "config", "user.email"], env=env, capture_output=True, text=True).stdout
    assert email == "dev-1@agents.forge\n"
    # The credential helper answers with the agent's own token, whatever host asks.
    filled = subprocess.run(
        [*git, "credential", "fill"],
        input="protocol=http\nhost=kswarm\n\n",
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "username=dev-1\n" in filled and f"password={token}\n" in filled


def test_provision_is_idempotent_and_repairs(setup) -> None:
    spec, layout, client, gateway = setup
    agent = spec.expand()[0]
    token = provision(client, layout, agent, spec.swarm, None)
    assert provision(client, layout, agent, spec.swarm, None) == token  # still valid: kept
    memory_md = layout.agent_dir("dev-1", "memory") / "MEMORY.md"
    memory_md.write_text("I am rev now.\n")  # a rewritten identity
    client.revoke_tokens("dev-1")
    new_token = provision(client, layout, agent, spec.swarm, None)
    assert new_token != token and me(gateway, new_token).status_code == 200
    assert me(gateway, token).status_code == 401
    text = memory_md.read_text()
    assert text.startswith("# Memory of dev-1") and "I am rev now." in text  # banner back, note kept


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_uids_are_stable_and_distinct(setup) -> None:
    spec, layout, client, _ = setup
    uids = [allocate_uid(layout, a.name, 20000) for a in spec.expand()]
    assert uids == [20000, 20001]
    assert allocate_uid(layout, "new-one", 20000) == 20002
    assert [allocate_uid(layout, a.name, 20000) for a in spec.expand()] == uids
    provision(client, layout, spec.expand()[1], spec.swarm, uids[1])
    for path in layout.agent_data("rev").rglob("*"):
        assert path.lstat().st_uid == uids[1], path


def test_links_the_agent_planted_are_replaced_not_followed(setup, short_tmp: Path) -> None:
    """Before a restart an agent may point its files at the orchestrator's (root's) files: the next
    provisioning must neither write, read nor chmod through those links."""
    from orchestrator.supervisor.memory import MemoryOpError, snapshot

    spec, layout, client, gateway = setup
    agent = spec.expand()[0]
    provision(client, layout, agent, spec.swarm, None)
    victims = short_tmp / "victims"
    victims.mkdir()
    for name in ("gitconfig", "memory", "token"):
        (victims / name).write_text(f"precious {name}\n")
    (victims / "dir").mkdir(mode=0o755)
    home, memory = layout.agent_dir("dev-1", "home"), layout.agent_dir("dev-1", "memory")
    (home / ".gitconfig").unlink()
    (home / ".gitconfig").symlink_to(victims / "gitconfig")
    (memory / "MEMORY.md").unlink()
    (memory / "MEMORY.md").symlink_to(victims / "memory")
    token = layout.token_file("dev-1")
    token.unlink()
    token.symlink_to(victims / "token")
    provision(client, layout, agent, spec.swarm, None)
    for name in ("gitconfig", "memory", "token"):
        assert (victims / name).read_text() == f"precious {name}\n"
    assert (
        not (home / ".gitconfig").is_symlink() and "dev-1@agents.forge" in (home / ".gitconfig").read_text()
    )
    assert (memory / "MEMORY.md").read_text().startswith("# Memory of dev-1")
    assert not token.is_symlink() and me(gateway, token.read_text().strip()).status_code == 200

    # A whole dir replaced by a link: provisioning makes a real one again and never chmods the target.
    (home / ".kswarm" / "token").unlink()
    (home / ".kswarm").rmdir()
    (home / ".kswarm").symlink_to(victims / "dir")
    provision(client, layout, agent, spec.swarm, None)
    assert ((victims / "dir").stat().st_mode & 0o777) == 0o755 and list((victims / "dir").iterdir()) == []
    assert (home / ".kswarm").is_dir() and not (home / ".kswarm").is_symlink()

    # Memory snapshots copy as the orchestrator: a memory dir that is a link is refused.
    os.rename(memory, memory.with_name("memory.real"))
    memory.symlink_to(victims)
    with pytest.raises(MemoryOpError, match="not a directory"):
        snapshot(layout, "dev-1")
