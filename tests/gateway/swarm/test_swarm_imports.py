"""The seam's rule: the gateway's swarm code and UI import nothing of ``orchestrator`` (the one exception
the UI keeps is the harness's result schema, ``orchestrator.verify.models``, which issue 14 names as the
contract the Jobs panel reads)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
HARNESS_SCHEMA = "orchestrator.verify.models"


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):  # function-level imports included
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_gateway_swarm_and_ui_import_nothing_of_the_orchestrator() -> None:
    files = sorted((REPO / "gateway" / "swarm").glob("*.py")) + sorted((REPO / "gateway" / "ui").glob("*.py"))
    assert len(files) > 10
    offenders = {
        str(path.relative_to(REPO)): sorted(bad)
        for path in files
        if (
            bad := {
                m
                for m in imported_modules(path)
                if (m == "orchestrator" or m.startswith("orchestrator.")) and m != HARNESS_SCHEMA
            }
        )
    }
    assert offenders == {}
