"""AgentConfig: from the orchestrator's variables, a mounted file, and KSWARM_AGENT_* overrides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from agents.config import AgentConfig
from agents.prompt import Identity, system_prompt


def test_orchestrator_environment_file_and_overrides(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("ksw_secret\n")
    (tmp_path / "agent.yaml").write_text("role: reviewer\nmax_turns: 7\nmodel: claude-x\nbash_timeout_s: 3\n")
    env = {
        "KSWARM_AGENT": "dev-1",
        "KSWARM_SWARM": "kernels",
        "KSWARM_ROLE": "developer",
        "KSWARM_GATEWAY_SOCKET": str(tmp_path / "gw.sock"),
        "KSWARM_TOKEN_FILE": str(tmp_path / "token"),
        "KSWARM_WORK": str(tmp_path / "work"),
        "KSWARM_MEMORY": str(tmp_path / "memory"),
        "KSWARM_HISTORY": str(tmp_path / "history"),
        "KSWARM_HEARTBEAT_S": "2.5",
        "KSWARM_AGENT_CONFIG": str(tmp_path / "agent.yaml"),
        "KSWARM_AGENT_MAX_TURNS": "9",
        "ANTHROPIC_API_KEY": "sk-never-read",
    }
    config = AgentConfig.load(env)
    assert (config.name, config.swarm, config.role, config.model) == (
        "dev-1",
        "kernels",
        "developer",
        "claude-x",
    )
    assert config.max_turns == 9 and config.bash_timeout_s == 3 and config.heartbeat_s == 2.5
    assert config.kind == "anthropic" and config.base_url() == "http://kswarm"
    assert config.secret() == "ksw_secret" and "ksw_secret" not in repr(config)
    assert "sk-never-read" not in config.model_dump_json()


def test_json_file_scripted_default_and_errors(tmp_path: Path) -> None:
    dirs = {f"{d}_dir": str(tmp_path / d) for d in ("work", "memory", "history")}
    fields = {"name": "a", "gateway_url": "http://127.0.0.1:1/", "token": "t", **dirs}
    (tmp_path / "a.json").write_text(json.dumps(fields))
    config = AgentConfig.load({}, path=tmp_path / "a.json")
    assert config.kind == "scripted" and config.base_url() == "http://127.0.0.1:1"
    env = {"KSWARM_AGENT": "a", "KSWARM_WORK": "/w", "KSWARM_MEMORY": "/m", "KSWARM_HISTORY": "/h"}
    with pytest.raises(ValidationError, match="gateway_socket or gateway_url"):
        AgentConfig.load(env)
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        AgentConfig.load(env | {"KSWARM_GATEWAY_URL": "http://h", "KSWARM_AGENT_MAX_TURNS": "0"})
    with pytest.raises(ValidationError, match="work_dir"):  # never guessed: the cwd may be anyone's repo
        AgentConfig.load({"KSWARM_AGENT": "a", "KSWARM_GATEWAY_URL": "http://h"})


def test_system_prompt_has_role_identity_rules_and_memory(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "MEMORY.md").write_text("# Memory of a\n\n- softmax passes\n")
    (tmp_path / "role.md").write_text("You write fast kernels.")
    config = AgentConfig(
        name="a", gateway_url="http://h", token="t", role="developer", swarm="k",
        prompt=str(tmp_path / "role.md"), memory_dir=tmp_path / "memory", work_dir=tmp_path / "work",
        history_dir=tmp_path / "history",
    )  # fmt: skip
    text = system_prompt(config, Identity("a", "a@agents.k"))
    assert text.startswith("You are a, a developer agent in swarm `k`. Your git identity is a <a@agents.k>.")
    assert "You write fast kernels." in text and "House rules:" in text and "- softmax passes" in text
    reviewer = config.model_copy(update={"prompt": None, "role": "reviewer"})
    assert "never approve your own work" in system_prompt(reviewer, Identity("a", "e"))
