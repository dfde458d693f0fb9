"""``kswarm ui`` and the UI's lines in ``up``'s banner and the demo's end (issue 24): a one-time login
link on one unwrapped line, also at 40 columns into a pipe; no link to a UI the demo is about to stop."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import httpx
from cli_kit import Kswarm
from rich.console import Console

from kstest.gateway import GatewayThread, free_port
from orchestrator.cli.ui import banner_ui_lines
from orchestrator.demo.launcher import Running
from orchestrator.demo.report import print_summary
from orchestrator.spec import SwarmSpec

ROOT = Path(__file__).resolve().parents[3]


def test_kswarm_ui_prints_one_unwrapped_link_into_a_narrow_pipe(
    gateway: GatewayThread, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "KSWARM_URL": gateway.url,
        "KSWARM_TOKEN": gateway.operator_token,
        "KSWARM_HOME": str(tmp_path / "home"),
        "COLUMNS": "40",
    }
    ran = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "ui"],
        env=env,
        capture_output=True,  # stdout is a pipe, not a terminal
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert len(lines) == 1 and len(lines[0]) > 40, ran.stdout
    link = lines[0]
    assert link.startswith(f"{gateway.url}/ui/login/link/") and gateway.operator_token not in link
    with httpx.Client() as browser:
        assert browser.get(link).status_code == 303  # it logs a browser in ...
        assert browser.get(link).status_code == 401  # ... once


def test_kswarm_ui_with_an_agents_token_is_refused(gateway: GatewayThread, kswarm: Kswarm) -> None:
    agent = gateway.add_principal("dev-1")
    ran = kswarm("ui", url=gateway.url, token=agent)
    assert ran.code != 0 and ran.stdout == ""
    assert "may not open the operator UI" in ran.error_line()


def test_the_banner_says_how_to_get_a_link_when_none_can_be_made() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    lines = asyncio.run(banner_ui_lines(url, "ksw_x"))
    assert lines[0] == f"UI: {url}/ui"
    assert "`kswarm ui` makes one" in lines[1] and "ksw_x" not in "".join(lines)


def test_the_banner_has_a_link_from_a_live_gateway(gateway: GatewayThread) -> None:
    lines = asyncio.run(banner_ui_lines(gateway.url, gateway.operator_token))
    assert lines[0] == f"UI: {gateway.url}/ui"
    assert lines[1].startswith(f"login link (one use, 10 min): {gateway.url}/ui/login/link/")


SUMMARY = {
    "tasks": [],
    "ok": True,
    "elapsed_s": 1.0,
    "dataset": {
        "summary": {"pools": {}, "by_task": {}, "records": 0, "accepted": 0, "tasks_with_accepted": 0},
        "paths": {},
    },
}


def demo_end(keep: bool, ui: list[str] | None, tmp_path: Path) -> str:
    running = Running(
        home=tmp_path,
        url="http://127.0.0.1:9",
        socket=tmp_path / "s.sock",
        operator_token="ksw_secret",
        spec=SwarmSpec.model_validate({"swarm": "s", "agents": [{"name": "dev"}]}),
        roster=None,  # type: ignore[arg-type]  # print_summary does not read it
        backend="process",
        warnings=(),
    )
    console = Console(width=40, force_terminal=False)
    with console.capture() as captured:
        print_summary(console, SUMMARY, running, keep, ui)
    return captured.get()


def test_the_demo_without_keep_prints_no_login_link_and_says_how_to_keep_it(tmp_path: Path) -> None:
    text = demo_end(False, None, tmp_path)
    assert "/ui/login" not in text and "ksw_secret" not in text
    assert "./kswarm demo --keep" in text


def test_the_demo_with_keep_prints_its_link_on_one_line(tmp_path: Path) -> None:
    link = "http://127.0.0.1:9/ui/login/link/" + "c" * 43
    text = demo_end(True, ["UI: http://127.0.0.1:9/ui", f"login link (one use, 10 min): {link}"], tmp_path)
    assert f"login link (one use, 10 min): {link}\n" in text and "ksw_secret" not in text
