"""Kernel verification harness: static gate, isolated child runner, parent-side comparison.

Public API: ``verify(task_dir, candidate_path, pool) -> VerificationResult``; see docs/verification.md.
Exports are resolved lazily, so importing one module does not pay for the others. (The child never
imports this package: spawn.py sends it the child-side modules' sources.)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.verify.harness import verify
    from orchestrator.verify.models import Flag, TrialResult, VerificationResult
    from orchestrator.verify.static.gate import StaticReport, Violation, check_file, check_source
    from orchestrator.verify.tasks import Task, TaskError, Tolerance, default_tolerance, load_task

_EXPORTS = {
    "verify": "harness",
    "Flag": "models",
    "TrialResult": "models",
    "VerificationResult": "models",
    "StaticReport": "static.gate",
    "Violation": "static.gate",
    "check_file": "static.gate",
    "check_source": "static.gate",
    "Task": "tasks",
    "TaskError": "tasks",
    "Tolerance": "tasks",
    "default_tolerance": "tasks",
    "load_task": "tasks",
}

__all__ = [
    "Flag",
    "StaticReport",
    "Task",
    "TaskError",
    "Tolerance",
    "TrialResult",
    "VerificationResult",
    "Violation",
    "check_file",
    "check_source",
    "default_tolerance",
    "load_task",
    "verify",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"orchestrator.verify.{_EXPORTS[name]}"), name)
