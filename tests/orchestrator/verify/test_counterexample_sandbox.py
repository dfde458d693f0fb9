"""A red-team agent's generator runs in the harness's sandbox (orchestrator/verify/generator_child.py),
never in the harness: these generators attack it as an agent would. Each one, if its attack worked,
would end with a *confirmed* counterexample (it returns an input the capped kernel fails on, or patches
the judgement), or leave a trace the test looks for (a connection accepted, a file written)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from verifykit import CATALOGUE, CHEATS

from kswarm_contracts.counterexample import CounterexampleOutcome
from orchestrator.verify import verify
from orchestrator.verify.counterexample import CounterexampleRun
from orchestrator.verify.forkserver import ForkServer

ADD = CATALOGUE / "add"
CAPPED = CHEATS / "fresh_shapes" / "shown_lengths_only.py"
GENERATORS = CHEATS / "counterexamples"


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    with ForkServer(interpret=True) as shared:
        yield shared


def _run(server: ForkServer, name: str, timeout_s: float = 60.0, **fill: str) -> CounterexampleOutcome:
    source = (GENERATORS / name).read_text()
    for key, value in fill.items():
        source = source.replace(f"__{key}__", value)
    run = CounterexampleRun(generator=source, generator_timeout_s=timeout_s)
    outcome = verify(ADD, CAPPED, "cpu", server=server, counterexample=run).counterexample
    assert outcome is not None
    return outcome


def _blocked(outcome: CounterexampleOutcome) -> None:
    assert outcome.status == "refused", outcome
    assert outcome.reasons[0].startswith("the generator failed: PermissionError"), outcome.reasons


def test_a_generator_cannot_open_a_tcp_connection(server: ForkServer) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        outcome = _run(server, "net_tcp.py", PORT=str(port))
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # a connection, even one closed since, would be queued here
    _blocked(outcome)


def test_a_generator_cannot_reach_a_unix_socket_like_the_gateways(server: ForkServer, tmp_path: Path) -> None:
    path = tmp_path / "gw.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(4)
        outcome = _run(server, "net_unix.py", SOCKET=str(path))
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()
    _blocked(outcome)


@pytest.mark.parametrize("target", ["another agent's file", "the task's own file", "the candidate"])
def test_a_generator_cannot_read_a_file_outside_its_sandbox(
    server: ForkServer, tmp_path: Path, target: str
) -> None:
    other = tmp_path / "agents" / "blue-1" / "notes.md"
    other.parent.mkdir(parents=True)
    other.write_text("the blue team's plan")
    path = {"another agent's file": other, "the task's own file": ADD / "task.py", "the candidate": CAPPED}
    _blocked(_run(server, "reads_file.py", PATH=str(path[target])))


def test_a_generator_cannot_forge_the_outcome_or_write_the_result(server: ForkServer, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    outcome = _run(server, "forges_outcome.py", OUT=str(out))
    assert outcome.status == "refused", outcome
    assert outcome.reasons == [
        "input 0: the kernel is right on this input (max abs error 0, within its tolerance "
        "atol=0.0001, rtol=0.0001)"
    ]
    assert not out.exists(), "the generator wrote a file"


def test_an_endless_generator_is_stopped_at_its_timeout(server: ForkServer) -> None:
    outcome = _run(server, "endless.py", timeout_s=2.0)
    assert outcome.status == "refused", outcome
    assert outcome.reasons == ["the generator ran past its 2 s limit and was stopped"]
    assert outcome.inputs_tried == 0
