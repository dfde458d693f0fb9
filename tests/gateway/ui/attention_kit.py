"""Attention as an operator reads it: ``GET /api/attention`` and ``kswarm attention --json`` (the whole
``kswarm`` app, driven in-process by typer's runner against the real gateway)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from kstest.gateway import GatewayThread
from orchestrator.cli.main import app


def attention_items(gw: GatewayThread) -> dict[str, dict[str, Any]]:
    """The items of ``/api/attention`` by key."""
    with gw.client(gw.operator_token) as op:
        reply = op.get("/api/attention")
    assert reply.status_code == 200, reply.text
    return {i["key"]: i for i in reply.json()["items"]}


def cli_attention(gw: GatewayThread, tmp: Path, *argv: str) -> tuple[int, str, str]:
    """``kswarm attention ARGV`` as the operator: (exit code, stdout, stderr)."""
    env = {
        "KSWARM_URL": gw.url,
        "KSWARM_TOKEN": gw.operator_token,
        "KSWARM_HOME": str(tmp / "no-home"),
        "COLUMNS": "250",
    }
    result = CliRunner().invoke(app, ["attention", *argv], env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def cli_attention_items(gw: GatewayThread, tmp: Path) -> dict[str, dict[str, Any]]:
    """The items of ``kswarm attention --json`` by key (exit 0 asserted)."""
    code, out, err = cli_attention(gw, tmp, "--json")
    assert code == 0, err
    return {i["key"]: i for i in json.loads(out)["items"]}


def action_urls(item: dict[str, Any]) -> dict[str, str]:
    return {a["label"]: a["url"] for a in item.get("actions") or []}
