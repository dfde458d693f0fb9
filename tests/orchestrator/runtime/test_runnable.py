"""``kswarm validate`` and ``kswarm up -f`` refuse a spec whose agents' runtime cannot start on this host
(before: the agents started and crash-looped, the reason buried in their log), through the real CLI:
the missing package or command named, with the command that installs it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from kstest.cli import KSWARM, cli_env

SPEC = """swarm: runnable
agents:
  - {name: lead, role: lead}
  - pattern: dev-{i}
    count: 2
    runtime: %s
"""


def validate(tmp_path: Path, runtime: str, **env: str) -> subprocess.CompletedProcess[str]:
    spec = tmp_path / "swarm.yaml"
    spec.write_text(SPEC % runtime)
    return subprocess.run(
        [KSWARM, "validate", "-f", str(spec)],
        env=cli_env(tmp_path / "home", **env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_claude_code_runtime_without_its_cli_is_refused_with_the_install_command(tmp_path: Path) -> None:
    # A claude_agent_sdk without its bundled CLI first on the path: what a broken or partial install is.
    shadow = tmp_path / "shadow" / "claude_agent_sdk"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    path = os.pathsep.join(filter(None, [str(shadow.parent), os.environ.get("PYTHONPATH", "")]))
    done = validate(tmp_path, "claude-code", PYTHONPATH=path)
    assert done.returncode == 2, done.stdout + done.stderr
    line = " ".join(done.stderr.split())
    assert "agents dev-1, dev-2: runtime claude-code needs the Claude Code CLI" in line
    assert "pip install -e '.[server,claude]'" in line and "lead" not in line.split("needs")[0]


def test_the_installed_claude_code_runtime_validates(tmp_path: Path) -> None:
    done = validate(tmp_path, "claude-code")
    assert done.returncode == 0, done.stderr


def test_a_command_that_is_not_there_is_refused(tmp_path: Path) -> None:
    done = validate(tmp_path, "{command: [no-such-agent-binary, --go]}")
    assert done.returncode == 2
    assert "runtime.command 'no-such-agent-binary' is not found on this host" in done.stderr
    done = validate(tmp_path, "{command: [python, -m, no_such_module_here]}")
    assert done.returncode == 2
    assert "python -m no_such_module_here, a module this host's Python does not have" in done.stderr


def test_kswarm_up_refuses_the_same_spec_before_starting_anything(tmp_path: Path) -> None:
    spec = tmp_path / "swarm.yaml"
    spec.write_text(SPEC % "{command: [no-such-agent-binary]}")
    home = tmp_path / "home"
    done = subprocess.run(
        [KSWARM, "up", "--home", str(home), "--port", "0", "-f", str(spec)],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "no-such-agent-binary' is not found on this host" in done.stdout + done.stderr
    assert not (home / "gateway.json").exists(), "nothing started"
