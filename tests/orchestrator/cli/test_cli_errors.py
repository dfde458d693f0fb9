"""Every error class of the client, through every command that reaches the gateway: one line on stderr,
nothing on stdout, the class's exit code (docs/cli.md). Against a real gateway (uvicorn, Redis)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_kit import Kswarm

from gateway.client import (
    BadInput,
    Conflict,
    GatewayClient,
    GatewayFailed,
    GatewayTarget,
    Missing,
    NoGateway,
    Refused,
    TokenRefused,
)
from kstest.gateway import GatewayThread, free_port

DOCS = Path(__file__).resolve().parents[3] / "docs" / "cli.md"
FORGED = "ksw_" + "A" * 43  # the shape of a real token; the gateway never issued it

# One invocation of every command that talks to the gateway ({out}: a fresh dir).
GATEWAY_COMMANDS = [
    ("agent", "add", "zed"),
    ("agent", "list"),
    ("chat", "send", "general", "hello"),
    ("chat", "tail"),
    ("chat", "tail", "-f", "--json"),
    ("prs",),
    ("pr", "show", "1", "--repo", "kswarm/dataset"),
    ("pr", "why", "1"),
    ("jobs",),
    ("job", "show", "j0123456789abc"),
    ("tasks", "list"),
    ("tasks", "seed"),
    ("tasks", "post", "t-1", "a title"),
    ("tasks", "lead", "zed"),
    ("tasks", "release", "t-1"),
    ("dataset", "build", "--out", "{out}"),
    ("ui",),
]


def argv_of(command: tuple[str, ...], tmp_path: Path) -> list[str]:
    return [part.format(out=tmp_path / "out") for part in command]


def ids(command: tuple[str, ...]) -> str:
    return " ".join(command)


@pytest.mark.parametrize("command", GATEWAY_COMMANDS, ids=ids)
def test_a_wrong_token_is_exit_1_and_one_line_everywhere(
    gateway: GatewayThread, kswarm: Kswarm, tmp_path: Path, command: tuple[str, ...]
) -> None:
    ran = kswarm(*argv_of(command, tmp_path), url=gateway.url, token=FORGED)
    assert ran.code == TokenRefused.exit_code == 1, ran
    assert ran.stdout == "", "a refused command prints no table, no JSON, nothing"
    line = ran.error_line()
    assert line.startswith("the gateway refused the token: ") and line.endswith("(HTTP 401)"), line


def test_an_agents_token_on_an_operators_command_is_refused(gateway: GatewayThread, kswarm: Kswarm) -> None:
    agent = gateway.add_principal("mallory")
    ran = kswarm("agent", "add", "mallory-2", "--kind", "operator", url=gateway.url, token=agent)
    assert ran.code == 1 and ran.stdout == ""
    assert re.fullmatch(r"the gateway refused the token: .+ \(HTTP 403\)", ran.error_line())
    with gateway.client(gateway.operator_token) as op:
        names = {p["name"] for p in op.get("/api/agents").json()}
    assert "mallory-2" not in names


@pytest.mark.parametrize("command", GATEWAY_COMMANDS, ids=ids)
def test_no_gateway_for_the_home_is_exit_3(kswarm: Kswarm, tmp_path: Path, command: tuple[str, ...]) -> None:
    home = (tmp_path / "empty-home").resolve()
    ran = kswarm(*argv_of(command, tmp_path), home=home)
    assert ran.code == NoGateway.exit_code == 3 and ran.stdout == ""
    start = f"start one with `kswarm up --home {home}`, or set KSWARM_URL"
    assert ran.error_line() == f"no gateway: none is running for {home} ({start})"


@pytest.mark.parametrize("command", GATEWAY_COMMANDS, ids=ids)
def test_an_unreachable_gateway_is_exit_3(kswarm: Kswarm, tmp_path: Path, command: tuple[str, ...]) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    ran = kswarm(*argv_of(command, tmp_path), url=url, token=FORGED)
    assert ran.code == 3 and ran.stdout == ""
    assert ran.error_line().startswith(f"no gateway: cannot reach {url}: ")


def test_a_stale_gateway_json_is_no_gateway(kswarm: Kswarm, tmp_path: Path) -> None:
    home = (tmp_path / "h").resolve()
    home.mkdir()
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(gone.stdout)
    (home / "gateway.json").write_text(
        json.dumps({"url": "http://127.0.0.1:1", "socket": "", "pid": dead_pid})
    )
    (home / "operator.token").write_text(FORGED + "\n")
    ran = kswarm("agent", "list", "--home", str(home))
    assert ran.code == 3 and ran.error_line().startswith(f"no gateway: none is running for {home} ")


def test_no_token_is_no_gateway(kswarm: Kswarm, gateway: GatewayThread, tmp_path: Path) -> None:
    ran = kswarm("agent", "list", url=gateway.url)
    assert ran.code == 3 and ran.stdout == ""
    assert ran.error_line().startswith(f"no gateway: no token for {gateway.url}: set KSWARM_TOKEN")


@pytest.mark.parametrize("over", ["tcp", "socket"])
def test_home_finds_its_running_gateway(
    gateway: GatewayThread, kswarm: Kswarm, tmp_path: Path, over: str
) -> None:
    """``--home`` alone is enough: its gateway.json (the gateway runs in this process) and operator.token."""
    home = tmp_path / "home"
    home.mkdir()
    url = gateway.url if over == "tcp" else ""
    info = {"url": url, "socket": str(gateway.socket_path), "pid": os.getpid()}
    (home / "gateway.json").write_text(json.dumps(info))
    (home / "operator.token").write_text(gateway.operator_token + "\n")
    added = kswarm("agent", "add", f"via-{over}", "--home", str(home), "--json")
    assert added.code == 0, added
    assert json.loads(added.stdout)["token"].startswith("ksw_")
    listed = kswarm("agent", "list", "--json", home=tmp_path / "elsewhere", url="", token="")
    assert listed.code == 3, "without --home (and no KSWARM_HOME) the other home has no gateway"
    listed = kswarm("agent", "list", "--home", str(home), "--json")
    assert f"via-{over}" in {a["agent"] for a in json.loads(listed.stdout)}


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (("job", "show", "j0123456789abc"), "(HTTP 404)"),
        (("job", "cancel", "j0123456789abc"), "(HTTP 404)"),
        (("agent", "timeline", "nobody"), "no agent 'nobody' at this gateway"),
        (("chat", "tail", "nochannel"), "(HTTP 404)"),
        (("chat", "send", "nochannel", "hi"), "(HTTP 404)"),
        (("worker", "token", "nopool"), "(HTTP 404)"),
        (("tasks", "lead", "nobody"), "(HTTP 404)"),
        (("pr", "why", "999", "--repo", "kswarm/nosuch"), "(HTTP 404)"),
        (("pr", "why", "999"), "no PR #999 in any repo"),
        (("jobs", "--pool", "nosuch"), "no pool 'nosuch' (pools: "),
        (("tasks", "release", "nosuch"), "(HTTP 404)"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else "",
)
def test_not_found_is_exit_4(
    gateway: GatewayThread, kswarm: Kswarm, command: tuple[str, ...], says: str
) -> None:
    ran = kswarm(*command, url=gateway.url, token=gateway.operator_token)
    assert ran.code == Missing.exit_code == 4 and ran.stdout == "", ran
    line = ran.error_line()
    assert line.startswith("not found: ") and says in line, line


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (("agent", "add", "Not A Name!"), "(HTTP 4"),
        (("chat", "send", "general", "hi @ghost"), "@ghost"),
        (("prs", "--repo", "nonsense"), "--repo is org/name, not 'nonsense'"),
        (("pr", "show", "1", "--repo", "a/b/c"), "--repo is org/name, not 'a/b/c'"),
        (("job", "show", "j-nosuch"), "a job id is j and 12 to 24 lowercase hex digits"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else "",
)
def test_bad_input_is_exit_2(
    gateway: GatewayThread, kswarm: Kswarm, command: tuple[str, ...], says: str
) -> None:
    ran = kswarm(*command, url=gateway.url, token=gateway.operator_token)
    assert ran.code == BadInput.exit_code == 2 and ran.stdout == "", ran
    line = ran.error_line()
    assert line.startswith("bad input: ") and says in line, line


@pytest.mark.parametrize(
    "command", [("tasks", "list", "--state", "bogus"), ("prs", "--state", "bogus")], ids=ids
)
def test_an_invalid_choice_is_exit_2_with_the_choices(
    gateway: GatewayThread, kswarm: Kswarm, command: tuple[str, ...]
) -> None:
    ran = kswarm(*command, url=gateway.url, token=gateway.operator_token)
    assert ran.code == 2 and ran.stdout == ""
    assert "'bogus' is not one of" in ran.stderr and "'open'" in ran.stderr


def test_conflict_is_exit_1(gateway: GatewayThread, kswarm: Kswarm) -> None:
    first = kswarm("agent", "add", "twice", url=gateway.url, token=gateway.operator_token)
    assert first.code == 0, first
    again = kswarm("agent", "add", "twice", url=gateway.url, token=gateway.operator_token)
    assert again.code == Conflict.exit_code == 1 and again.stdout == ""
    assert re.fullmatch(r"conflict: .+ \(HTTP 409\)", again.error_line())


def test_the_event_stream_raises_a_refusal_instead_of_retrying(gateway: GatewayThread) -> None:
    with GatewayClient(GatewayTarget(token=FORGED, url=gateway.url)) as client:
        events = client.follow_events()
        with pytest.raises(TokenRefused) as refused:
            next(events)
    assert refused.value.status == 401 and refused.value.exit_code == 1


def test_every_class_is_documented_with_its_exit_code() -> None:
    text = DOCS.read_text()
    for kind in (NoGateway, TokenRefused, Missing, BadInput, Conflict, Refused, GatewayFailed):
        row = re.search(rf"^\| `{kind.__name__}` \|.*\| (\d+) \|$", text, re.MULTILINE)
        assert row is not None, f"docs/cli.md has no row for {kind.__name__}"
        assert int(row.group(1)) == kind.exit_code, kind.__name__
        assert f"`{kind.prefix}: " in row.group(0) or f"``{kind.prefix}: " in row.group(0), kind.__name__
