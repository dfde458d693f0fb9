"""The spec's ``dataset:`` section (``DatasetRules``): checked strictly, and what ``kswarm dataset build``
reads from the running swarm (its rules and each agent's role)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.dataset.rules import DatasetRules
from orchestrator.cli.dataset import spec_rules_and_roles
from orchestrator.spec import SpecError, parse_spec

SPEC = """swarm: kernels
agents:
  - name: lead
    role: lead
  - pattern: dev-{i}
    count: 2
    role: developer
dataset:
  rejected_timelines: false
  timeline_excerpt_bytes: 4096
"""


def test_the_spec_sets_the_dataset_rules_and_the_build_reads_them(tmp_path: Path) -> None:
    spec = parse_spec(SPEC)
    assert spec.dataset == DatasetRules(rejected_timelines=False, timeline_excerpt_bytes=4096)
    assert parse_spec(SPEC.split("dataset:")[0]).dataset == DatasetRules()

    home = tmp_path / "home"
    assert spec_rules_and_roles(home) == (DatasetRules(), {}), "no swarm: the defaults"
    (home / "swarm").mkdir(parents=True)
    info = {"spec": spec.model_dump(mode="json", exclude={"source", "alerts"})}  # as the supervisor writes it
    (home / "swarm" / "swarm.json").write_text(json.dumps(info))
    rules, roles = spec_rules_and_roles(home)
    assert rules.rejected_timelines is False and rules.timeline_excerpt_bytes == 4096
    assert roles == {"lead": "lead", "dev-1": "developer", "dev-2": "developer"}


@pytest.mark.parametrize(
    "bad",
    [
        "  rejected_timeline: false\n",
        "  timeline_excerpt_bytes: 10\n",
        "  timeline_excerpt_bytes: 10000000\n",
    ],
)
def test_a_misspelt_or_unbounded_dataset_rule_is_refused(bad: str) -> None:
    with pytest.raises(SpecError, match="dataset"):
        parse_spec(SPEC.split("dataset:")[0] + "dataset:\n" + bad)
