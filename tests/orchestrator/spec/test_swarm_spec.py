"""swarm.yaml: the template, expansion, defaults, strict parsing, and errors that name the field and line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli.main import app
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
    assert spec.review.required_approvals >= 1
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
    assert spec.pools[0].name == "cpu" and spec.budgets.swarm.usd is None
    # The default policy asks for a passing verify job on the spec's first pool.
    assert spec.review.required_approvals == 1 and spec.review.required_checks == ["kswarm/verify:cpu"]


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
        (
            "swarm: k\nagents:\n  - role: lead\n",
            "swarm.yaml:3: agents[0]: give exactly one of name or pattern",
        ),
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
        (
            "swarm: k\nagents: [{name: a}]\ntasks:\n  max_claims_per_agent: -1\n",
            "swarm.yaml:4: tasks.max_claims_per_agent: Input should be greater than or equal to 0",
        ),
        ("swarm: k\n", "swarm.yaml:1: agents: Field required"),
        # Duplicate keys: YAML would keep the last one silently.
        (
            "swarm: k\nagents:\n  - name: a\n    model: m1\n    model: m2\n",
            "swarm.yaml:5: agents[0].model: given twice in one mapping (first on line 4)",
        ),
        ("swarm: k\nswarm: j\nagents: [{name: a}]\n", "swarm.yaml:2: swarm: given twice in one mapping"),
        # role is an enum: a typo names the choices.
        (
            "swarm: k\nagents:\n  - name: a\n    role: reviewr\n",
            "swarm.yaml:4: agents[0].role: Input should be 'lead', 'developer', 'reviewer' or 'red-team'",
        ),
        (
            "swarm: k\nagents:\n  - name: a\n    runtime: claude-cod\n",
            "swarm.yaml:4: agents[0].runtime: runtime 'claude-cod' is not one of loop, claude-code",
        ),
        # Unknown keys inside the components' own models are errors too.
        (
            "swarm: k\nagents: [{name: a}]\nreview:\n  required_approvals: 1\n  aprovals: 2\n",
            "swarm.yaml:5: review.aprovals: Extra inputs are not permitted",
        ),
        (
            "swarm: k\nagents: [{name: a}]\npools:\n  - name: cpu\n    rules: {max_runing_per_agent: 2}\n",
            "swarm.yaml:5: pools[0].rules.max_runing_per_agent: Extra inputs are not permitted",
        ),
        # Keys of the earlier spec: refused, with what to write instead.
        (
            "swarm: k\nagents: [{name: a}]\nreview:\n  approvals: 2\n",
            "swarm.yaml:4: review.approvals: Extra inputs are not permitted (renamed required_approvals)",
        ),
        (
            "swarm: k\nagents: [{name: a}]\nreview:\n  dismiss_on_push: false\n",
            "review.dismiss_on_push: Extra inputs are not permitted (not a setting: a new push always",
        ),
        (
            "swarm: k\nagents: [{name: a}]\npools:\n  - name: npu\n    cards_per_node: 8\n",
            "swarm.yaml:5: pools[0].cards_per_node: Extra inputs are not permitted (describe the nodes",
        ),
        (
            "swarm: k\nagents: [{name: a}]\nrepos:\n  - name: r\n    protected: [main]\n",
            "swarm.yaml:5: repos[0].protected: Extra inputs are not permitted (moved into the repo's policy",
        ),
        # Fields that could not take effect are refused.
        (
            "swarm: k\nagents: [{name: a}]\nreview:\n  required_checks: [kswarm/verify:gpu]\n",
            "swarm.yaml:4: review.required_checks: kswarm/verify:gpu names no pool of this spec (pools: cpu)",
        ),
        (  # evidence (issue 22 principle 6): a device level needs a device pool's check
            "swarm: k\nagents: [{name: a}]\nreview:\n  required_checks: [kswarm/verify:cpu]\n"
            "  min_evidence: device-verified\n",
            "swarm.yaml:5: review.min_evidence: device-verified needs a required check on a device pool",
        ),
        (  # a level that proves no kernel right cannot be required
            "swarm: k\nagents: [{name: a}]\nreview:\n  min_evidence: none\n",
            "review.min_evidence: Input should be 'cpu-shapes-only', 'cpu-screened' or 'device-verified'",
        ),
        (
            "swarm: k\nagents: [{name: a}]\nreview:\n  dataset: true\n",
            "swarm.yaml:4: review.dataset: a repo is a dataset by its kind: dataset",
        ),
        (
            "swarm: k\nagents:\n  - name: a\n    resources: {cpus: 2}\n",
            "swarm.yaml:4: agents[0].resources.cpus: the process backend cannot limit a CPU share",
        ),
        (
            "swarm: k\nagents: [{name: a}]\npools:\n  - name: cpu\n    workers: 2\n"
            "    nodes: [{name: n, devices: [0]}]\n",
            "swarm.yaml:4: pools[0]: pool cpu: workers: 2 needs 2 nodes",
        ),
        (
            "swarm: k\nagents: [{name: a}]\npools:\n  - name: cpu\n  - name: cpu\n",
            "swarm.yaml:5: pools[1]: pool 'cpu' is defined twice",
        ),
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
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    first = runner.invoke(app, ["init"])
    assert first.exit_code == 0, first.output
    spec = load_spec(tmp_path / "swarm.yaml")
    assert len(spec.expand()) >= 2
    again = runner.invoke(app, ["init"])
    assert again.exit_code != 0 and "exists" in again.output


def test_every_problem_is_listed_on_its_own_line() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec("swarm: k\nagents:\n  - name: a\n    role: boss\n    resourcez: {}\n")
    assert len(info.value.problems) == 2
    assert str(info.value).splitlines() == info.value.problems


def test_runtime_shorthand_is_the_kind() -> None:
    spec = parse_spec(
        "swarm: k\ndefaults: {runtime: claude-code}\nagents:\n  - name: a\n  - name: b\n    runtime: loop\n"
    )
    a, b = spec.expand()
    assert a.runtime.kind == "claude-code" and b.runtime.kind == "loop"


def test_a_dump_of_a_spec_validates_again_strictly() -> None:
    """swarm.json and the supervisor's child process reload the spec from its own dump."""
    import yaml

    spec = parse_spec(template_text())
    again = parse_spec(yaml.safe_dump(spec.model_dump(mode="json", exclude={"source"})))
    assert again == spec


def test_the_schema_refuses_unknown_keys_and_takes_the_runtime_shorthand() -> None:
    from orchestrator.spec import spec_schema

    schema = spec_schema()
    defs = schema["$defs"]
    assert schema["additionalProperties"] is False
    for name in ("AgentEntry", "PoolConfig", "ReviewPolicy", "BudgetLimit", "Lifecycle"):
        assert defs[name]["additionalProperties"] is False, name
    assert {"enum": ["loop", "claude-code"]} in defs["RuntimeOptions"]["anyOf"]
    assert defs["AgentEntry"]["properties"]["role"]["enum"] == ["lead", "developer", "reviewer", "red-team"]


def test_the_specs_task_rules_reach_the_board() -> None:
    from orchestrator.local.launcher import tasks_settings

    spec = parse_spec(
        "swarm: k\nagents: [{name: a}]\ntasks: {max_claims_per_agent: 5, done_needs_merged_pr: false}\n"
    )
    settings = tasks_settings(spec)
    assert (settings.max_claims_per_agent, settings.done_needs_merged_pr) == (5, False)
    assert tasks_settings(parse_spec("swarm: k\nagents: [{name: a}]\n")).max_claims_per_agent == 2


def test_the_specs_counterexample_rules_reach_the_gateway() -> None:
    from orchestrator.local.launcher import counterexample_settings

    spec = parse_spec(
        "swarm: k\nagents: [{name: r, role: red-team}]\nrepos: [{name: data, kind: dataset}]\n"
        "counterexamples: {targets: merged-and-open, max_pending_per_agent: 5}\n"
    )
    settings = counterexample_settings(spec)
    assert (settings.targets, settings.max_pending_per_agent) == ("merged-and-open", 5)
    assert settings.dataset_repo == "k/data"
    default = counterexample_settings(parse_spec("swarm: k\nagents: [{name: a}]\n"))
    assert (default.targets, default.max_pending_per_agent) == ("merged", 3)
    assert "counterexamples.budget" in error_of(
        "swarm: k\nagents: [{name: a}]\ncounterexamples: {budget: 1}\n"
    )
    assert "counterexamples.targets" in error_of(
        "swarm: k\nagents: [{name: a}]\ncounterexamples: {targets: everything}\n"
    )


def test_every_agent_gets_a_disk_bound_by_default_and_its_own_when_given() -> None:
    spec = parse_spec(
        "swarm: k\nagents:\n  - name: a\n  - name: b\n    resources: {disk: 64m}\n"
        "  - name: c\n    resources: {disk: 2GiB}\n"
    )
    disks = {a.name: a.resources.disk_bytes() for a in spec.expand()}
    assert disks == {"a": 1024**3, "b": 64 * 1024**2, "c": 2 * 1024**3}


@pytest.mark.parametrize(
    ("disk", "expected"),
    [
        ("lots", "swarm.yaml:4: agents[0].resources.disk: bad size 'lots': use bytes or a number with k"),
        ("1m", "swarm.yaml:4: agents[0].resources.disk: disk '1m' is below the smallest bound, 32m"),
        ("-5g", "swarm.yaml:4: agents[0].resources.disk: bad size '-5g'"),
    ],
)
def test_a_bad_disk_bound_is_refused_naming_the_field(disk: str, expected: str) -> None:
    assert expected in error_of(f"swarm: k\nagents:\n  - name: a\n    resources: {{disk: {disk}}}\n")
