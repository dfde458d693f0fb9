"""Agents of the process backend cannot reach the host's network, in every isolation mode it offers.

The attacker is the agent's own process (its command replaced by an attack script) and a command run
inside it with ``exec``: a TCP connect to the gateway's port, to a local model server (the fake
upstream: a keyless local model would let an agent skip the proxy and its budgets) and to any other
listening loopback port must fail, while a REST call through the gateway's unix socket still works.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator

import pytest

from kstest.upstream import ScriptedUpstream
from kstest.waiting import wait_for
from orchestrator.runtime import process
from orchestrator.sandbox.bubblewrap import BubblewrapSandbox

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="uid isolation needs root")

ATTACK = r"""
import json, os, socket, time
from pathlib import Path
import httpx

def connect(port):
    try:
        socket.create_connection(("127.0.0.1", int(port)), 2).close()
        return "connected"
    except OSError as exc:
        return f"refused: {exc}"

report = {name: connect(port) for name, port in json.loads(os.environ["KS_PORTS"]).items()}
try:  # an abstract unix socket lives in the network namespace, not in the filesystem
    socket.socket(socket.AF_UNIX).connect("\0" + os.environ["KS_ABSTRACT"])
    report["abstract"] = "connected"
except OSError as exc:
    report["abstract"] = f"refused: {exc}"
token = Path(os.environ["KSWARM_TOKEN_FILE"]).read_text().strip()
transport = httpx.HTTPTransport(uds=os.environ["KSWARM_GATEWAY_SOCKET"])
with httpx.Client(transport=transport, base_url="http://kswarm", timeout=10) as client:
    me = client.get("/api/me", headers={"Authorization": f"Bearer {token}"})
report["socket"] = {"status": me.status_code, "body": me.json() if me.status_code == 200 else me.text}
work = Path(os.environ["KSWARM_WORK"])
(work / "report.tmp").write_text(json.dumps(report))
(work / "report.tmp").replace(work / "report.json")
time.sleep(600)
"""


@pytest.fixture(params=["process", "userns:bubblewrap", "userns:namespaces"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """uid isolation, or the one sandbox (as root: a uid and a sandbox) built by each implementation."""
    mode, _, sandbox = request.param.partition(":")
    if sandbox:
        if sandbox == "bubblewrap" and BubblewrapSandbox().unavailable():
            pytest.skip(f"not tested with bubblewrap: {BubblewrapSandbox().unavailable()}")
        monkeypatch.setenv("KSWARM_SANDBOX", sandbox)  # launcher_env() hands it to every launcher
    return mode


@pytest.fixture
def listeners() -> Iterator[dict[str, int]]:
    """A local model server and one more listening loopback port (a Redis on TCP, say)."""
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen(8)
    with ScriptedUpstream() as upstream:
        yield {"model_server": upstream.port, "other_port": other.getsockname()[1]}
    other.close()


@pytest.fixture
def abstract_socket() -> Iterator[str]:
    name = f"ks-abstract-{os.urandom(4).hex()}"
    server = socket.socket(socket.AF_UNIX)
    server.bind("\0" + name)
    server.listen(8)
    yield name
    server.close()


def test_agent_reaches_only_the_gateway_socket(
    swarm_factory, gateway, listeners: dict[str, int], abstract_socket: str
) -> None:
    ports = {"gateway_tcp": gateway.port, **listeners}
    for port in ports.values():  # every one of them answers on the host
        socket.create_connection(("127.0.0.1", port), 2).close()
    command = json.dumps(["python", "-c", ATTACK])
    env = json.dumps({"KS_PORTS": json.dumps(ports), "KS_ABSTRACT": abstract_socket})
    swarm = swarm_factory(f"  - name: n-1\n    runtime: {{command: {command}, env: {env}}}\n")
    report_path = swarm.layout.agent_dir("n-1", "work") / "report.json"
    wait_for(report_path.exists, 30, "the agent's report")
    report = json.loads(report_path.read_text())
    for name in [*ports, "abstract"]:
        assert report[name].startswith("refused"), (name, report[name])
    assert report["socket"]["status"] == 200 and report["socket"]["body"]["name"] == "n-1", report["socket"]

    # The same from a command run inside the agent (exec joins its namespaces).
    connect = "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 2)"
    probe = "; ".join(f'python3 -c "{connect}" {port} && echo {name}-OPEN' for name, port in ports.items())
    runtime = swarm.supervisor.runtime
    out = runtime.exec("n-1", ["sh", "-c", probe]).output
    assert "-OPEN" not in out and out.count("Connection refused") == len(ports), out
    # No host interface shows: a sysfs of its own network namespace (only lo), or none (bubblewrap).
    sys_net = runtime.exec("n-1", ["ls", "/sys/class/net"]).output
    assert sys_net.split() == ["lo"] or "No such file or directory" in sys_net, sys_net


def test_isolation_none_is_refused_as_root() -> None:
    with pytest.raises(RuntimeError, match="would run agents as root"):
        process.choose_isolation("none")


def test_isolation_none_warns_about_files_and_network() -> None:
    """Without root and without namespaces agents share everything: the warning says so, network too."""
    warning = process.isolation_warning("none")
    assert warning is not None and "read each other's dirs" in warning and "loopback port" in warning
    assert process.isolation_warning("uid") is None and process.isolation_warning("userns") is None
