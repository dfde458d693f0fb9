"""swarm.yaml: the template, expansion, defaults, and errors that name the field and its line."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from orchestrator.cli.swarm import register
from orchestrator.spec import SpecError, load_spec, parse_size, parse_spec, template_text


def error_of(text: str) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    return str(info.value)


def test_template_is_valid_and_has_what_init_promises() -> None:
    spec = parse_spec(template_text())
    agents = spec.expand()
    assert len(agents) >= 2
    assert any(r.kind == "dataset" for r in spec.repos)
    assert [p.name for p in spec.pools] == ["cpu"]
    assert spec.review.approvals >= 1
    assert "#" in template_text()  # commented for humans


def test_patterns_expand_with_defaults_applied() -> None:
    spec = parse_spec(
        "swarm: k\n"
        "defaults: {model: m1, resources: {memory: 1g}}\n"
        "agents:\n"
        "  - name: lead\n    role: lead\n    model: m2\n"
        "  - pattern: dev-{i}\n    count: 12\n"
    )
    agents = spec.expand()
    assert [a.name for a in agents] == ["lead"] + [f"dev-{i}" for i in range(1, 13)]
    assert agents[0].model == "m2" and agents[1].model == "m1"
    assert agents[5].resources.memory_bytes() == 1024**3
    # Sections later issues fill are parsed now with defaults.
    assert spec.pools[0].name == "cpu" and spec.review.dismiss_on_push and spec.budgets.swarm.usd is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "swarm: k\nagents:\n  - name: a\n  - pattern: d-{i}\n    count: 0\n",
            "swarm.yaml:5: agents[1].count:",
        ),
        (
            "swarm: k\nagents:\n  - name: a\n    resourcez: {}\n",
            "swarm.yaml:4: agents[0].resourcez: Extra inputs",
        ),
        (
            "swarm: k\nagents:\n  - name: a\n  - name: a\n",
            "swarm.yaml:4: agents[1]: agent 'a' is defined twice",
        ),
        ("swarm: k\nagents:\n  - role: x\n", "swarm.yaml:3: agents[0]: give exactly one of name or pattern"),
        ("swarm: k\nagents:\n  - pattern: dev\n    count: 2\n", "swarm.yaml:3: agents[0]: pattern needs {i}"),
        ("swarm: k\nagents:\n  - name: Bad_Name\n", "swarm.yaml:3: agents[0]: bad agent name 'Bad_Name'"),
        (
            "swarm: k\nagents:\n  - name: a\n    resources:\n      memory: 12q\n",
            "swarm.yaml:5: agents[0].resources.memory: bad size",
        ),
        (
            "swarm: k\nagents:\n  - name: a\n    runtime:\n      env: {ANTHROPIC_API_KEY: x}\n",
            "swarm.yaml:5: agents[0].runtime.env: ANTHROPIC_API_KEY must not be given",
        ),
        (
            "swarm: k\nlifecycle:\n  stall_after_s: -1\nagents: [{name: a}]\n",
            "swarm.yaml:3: lifecycle.stall_after_s",
        ),
        (
            "swarm: k\nagents: [{name: a}]\nbudgets:\n  tokens_per_agent_per_day: 5\n",
            "swarm.yaml:4: budgets.tokens_per_agent_per_day: Extra inputs are not permitted",
        ),
        (
            "swarm: k\nagents: [{name: a}]\nbudgets:\n  agent:\n    usdd: 5\n",
            "swarm.yaml:5: budgets.agent.usdd: Extra inputs are not permitted",
        ),
        (
            "swarm: k\nagents: [{name: a}]\nbudgets:\n  swarm: {usd_per_day: -1}\n",
            "swarm.yaml:4: budgets.swarm.usd_per_day: Input should be greater than or equal to 0",
        ),
        (
            "swarm: k\nagents: [{name: a}]\nbudgets:\n  agents:\n    b: {usd: 1}\n",
            "swarm.yaml:5: budgets.agents.b: no agent 'b' in this spec",
        ),
        ("swarm: k\n", "swarm.yaml:1: agents: Field required"),
        ("swarm: k\nagents: [\n", "swarm.yaml:3: not valid YAML"),
        ("- just\n- a list\n", "swarm.yaml:1: the spec must be a mapping"),
    ],
)
def test_errors_name_the_field_and_line(text: str, expected: str) -> None:
    assert expected in error_of(text)


def test_load_spec_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "my.yaml"
    path.write_text("swarm: k\nagents:\n  - name: a\n    count: 3\n")
    with pytest.raises(SpecError, match=r"my\.yaml:3: agents\[0\]: count goes with pattern"):
        load_spec(path)


def test_parse_size() -> None:
    assert parse_size("512m") == 512 * 1024**2
    assert parse_size("1.5GiB") == int(1.5 * 1024**3)
    assert parse_size(4096) == 4096


def test_kswarm_init_writes_a_valid_commented_spec(tmp_path: Path, monkeypatch) -> None:
    app = typer.Typer()
    app.command("noop")(lambda: None)  # a second command keeps typer from collapsing the group
    register(app)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    first = runner.invoke(app, ["init"])
    assert first.exit_code == 0, first.output
    spec = load_spec(tmp_path / "swarm.yaml")
    assert len(spec.expand()) >= 2
    again = runner.invoke(app, ["init"])
    assert again.exit_code != 0 and "exists" in again.output
