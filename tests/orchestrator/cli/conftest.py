"""The whole ``kswarm`` app (``orchestrator.cli.main.app``) driven in-process by typer's runner, against
real gateways."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_kit import Kswarm, Ran
from typer.testing import CliRunner

from orchestrator.cli.main import app


@pytest.fixture
def kswarm(tmp_path: Path) -> Kswarm:
    """``kswarm(*argv, url=, token=, home=)``: no KSWARM_* from the test's own environment leaks in."""
    runner = CliRunner()

    def invoke(*argv: str, url: str = "", token: str = "", home: Path | None = None) -> Ran:
        env = {
            "KSWARM_URL": url,
            "KSWARM_TOKEN": token,
            "KSWARM_HOME": str(home or tmp_path / "no-home"),
            "COLUMNS": "200",
            "NO_COLOR": "1",
        }
        result = runner.invoke(app, list(argv), env=env)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception  # a traceback is a bug: never hide it behind an exit code
        return Ran(result.exit_code, result.stdout, result.stderr)

    return invoke
