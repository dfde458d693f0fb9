"""The real MCP Inspector CLI (npm ``@modelcontextprotocol/inspector``, pinned in
infra/ci/mcp-inspector.sh, which installs it and, where the system's is too old, Node) against a real
gateway's ``/mcp``: with a good token it lists the tools; with a bad or revoked one it exits at once,
non-zero, saying that the token is refused and where tokens come from -- not stuck in, or sent to, an
OAuth flow (issue 18: it used to read the 401 as "interactive OAuth required" and the user never
learnt the token was bad). docs/mcp.md, "MCP Inspector", records what it prints.

The bound on each run (``BOUND_S``) is far above a prompt refusal (about a second) and far below an
OAuth wait for a browser that never comes: a run that hits it fails the test."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kstest.gateway import GatewayThread

REPO = Path(__file__).resolve().parents[2]
INSTALLER = REPO / "infra" / "ci" / "mcp-inspector.sh"
BOUND_S = 30

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def inspector() -> Path:
    """The Inspector's command (installed once into the repo's ignored cache); skipped with the
    installer's one-line reason where npm or its registry is not there."""
    try:
        done = subprocess.run(["bash", str(INSTALLER)], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.skip("infra/ci/mcp-inspector.sh: npm did not finish the install in 600 s")
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
        pytest.skip(lines[-1])
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def inspector_home(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A fresh HOME per run (its catalog, OAuth state and secrets live there), secrets in memory."""
    home = tmp_path / "inspector-home"
    home.mkdir()
    yield {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "MCP_INSPECTOR_SECRET_STORE": "memory",
        "NO_COLOR": "1",
    }


def run_inspector(
    inspector: Path, env: dict[str, str], url: str, token: str, *flags: str, tty: bool = False
) -> subprocess.CompletedProcess[str]:
    """``tools/list`` at ``url`` with ``token``, as a script (no terminal) or as a person at one
    (``tty``: stdin is a pseudo-terminal, so the Inspector may start its interactive OAuth)."""
    argv = [str(inspector), "--cli", url, "--transport", "http", "--method", "tools/list"]
    argv += ["--header", f"Authorization: Bearer {token}", *flags]
    if not tty:
        return subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=BOUND_S, stdin=subprocess.DEVNULL
        )
    leader, follower = pty.openpty()
    try:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=BOUND_S, stdin=follower)
    finally:
        os.close(follower)
        os.close(leader)


def revoked_token(gateway: GatewayThread, name: str) -> str:
    token = gateway.add_principal(name)
    with gateway.client(gateway.operator_token) as op:
        assert op.delete(f"/api/principals/{name}/tokens").status_code == 200
    return token


def test_inspector_lists_the_tools_with_a_good_token(
    gateway: GatewayThread, inspector: Path, inspector_home: dict[str, str]
) -> None:
    token = gateway.add_principal("dev-1")
    done = run_inspector(inspector, inspector_home, f"{gateway.url}/mcp", token)
    assert done.returncode == 0, done.stderr
    names = [tool["name"] for tool in json.loads(done.stdout)["tools"]]
    assert "chat_post" in names and "whoami" in names, names


@pytest.mark.parametrize("kind", ["revoked", "made up"])
def test_inspector_in_ci_mode_says_the_token_is_refused(
    gateway: GatewayThread, inspector: Path, inspector_home: dict[str, str], kind: str
) -> None:
    """``--stored-auth-only``, the Inspector's own advice for scripts and CI (never start OAuth): it
    exits 3 (auth_required) with the gateway's reason, which names the token and says there is no
    OAuth server."""
    token = revoked_token(gateway, "erin") if kind == "revoked" else "ksw_" + "x" * 43
    done = run_inspector(inspector, inspector_home, f"{gateway.url}/mcp", token, "--stored-auth-only")
    assert done.returncode != 0, done.stdout
    said = done.stdout + done.stderr
    assert "invalid or revoked token" in said, said
    assert "issued by the swarm's operator" in said and "there is no OAuth server" in said, said
    assert "chat_post" not in said


def test_inspector_at_a_terminal_says_the_token_is_refused_instead_of_an_oauth_login(
    gateway: GatewayThread, inspector: Path, inspector_home: dict[str, str]
) -> None:
    """A person at a terminal: the Inspector starts its OAuth discovery, and the gateway's answers
    (no authorization server in the RFC 9728 document; dynamic client registration refused with the
    reason) end it at once with a message that says the token was refused -- no browser, no wait."""
    token = revoked_token(gateway, "frank")
    done = run_inspector(inspector, inspector_home, f"{gateway.url}/mcp", token, tty=True)
    assert done.returncode != 0, done.stdout
    said = done.stdout + done.stderr
    assert "this one was refused" in said and "there is no OAuth server" in said, said
    assert "Authorization complete" not in said


def test_inspector_as_a_plain_script_stops_at_once_with_auth_required(
    gateway: GatewayThread, inspector: Path, inspector_home: dict[str, str]
) -> None:
    """No terminal and no ``--stored-auth-only``: the Inspector refuses to start an OAuth login
    itself (exit 3, ``auth_required``) before it shows the gateway's reason -- the one case whose
    wording is the Inspector's alone (docs/mcp.md). It still stops promptly, and lists nothing."""
    token = revoked_token(gateway, "grace")
    done = run_inspector(inspector, inspector_home, f"{gateway.url}/mcp", token)
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    error = json.loads(done.stderr.strip().splitlines()[-1])["error"]
    assert error["code"] == "auth_required", error
    assert "chat_post" not in done.stdout
