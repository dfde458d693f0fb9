"""The complete specs docs/agents.md shows for each runtime are valid swarm specs, as the CLI checks
them (``kswarm validate``), and say what they claim (a real model; the runtime named)."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.spec import load_spec

DOC = Path(__file__).resolve().parents[3] / "docs" / "agents.md"


def section_specs() -> list[str]:
    text = DOC.read_text()
    section = text.split("## Complete specs, one per runtime", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```yaml\n(.*?)```", section, re.S)


def test_every_spec_in_the_docs_is_valid_and_names_its_runtime(tmp_path: Path) -> None:
    specs = section_specs()
    assert len(specs) == 2
    runtimes = []
    for i, text in enumerate(specs):
        path = tmp_path / f"swarm{i}.yaml"
        path.write_text(text)
        spec = load_spec(path)
        agents = spec.expand()
        assert all(a.model != "scripted" for a in agents)
        assert {a.role for a in agents} >= {"lead", "developer", "reviewer"}
        assert sum(p.workers for p in spec.pools) >= 1 and spec.dataset_repo() is not None
        runtimes.append({a.runtime.kind for a in agents})
    assert runtimes == [{"loop"}, {"loop", "claude-code"}]
