"""Parent <-> child protocol: the plan the parent writes and the status lines the child appends.

The status file is written inside the child, where candidate code runs, so the parent parses it
defensively and merges duplicate lines pessimistically: a report can add suspicion, never remove it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MAX_STATUS_BYTES = 4 << 20


@dataclass(frozen=True)
class TrialSpec:
    index: int
    inputs: str  # file the parent wrote (torch.save of a list of CPU inputs)
    outputs: str  # file the child must write: {"outputs": [...], "inputs": [...]}


@dataclass(frozen=True)
class Plan:
    candidate: str
    entry: str
    device: str
    status: str
    trials: list[TrialSpec]
    timing: dict[str, Any] | None = None  # {"indices": [...], "config": {...}} on device pools

    def dump(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> Plan:
        raw = json.loads(path.read_text(encoding="utf-8"))
        raw["trials"] = [TrialSpec(**t) for t in raw["trials"]]
        return cls(**raw)


@dataclass
class TrialReport:
    index: int
    launches: int | None = None
    torch_ops: list[str] = field(default_factory=list)
    oob: bool = False
    error: str | None = None
    elapsed_s: float | None = None

    def merge(self, other: TrialReport) -> None:
        if other.launches is not None:
            self.launches = other.launches if self.launches is None else min(self.launches, other.launches)
        self.torch_ops = sorted(set(self.torch_ops) | set(other.torch_ops))
        self.oob = self.oob or other.oob
        self.error = self.error or other.error


@dataclass
class ChildReport:
    import_ops: list[str] = field(default_factory=list)
    import_error: str | None = None
    trials: dict[int, TrialReport] = field(default_factory=dict)
    timings: dict[int, list[float]] = field(default_factory=dict)
    done: bool = False


def _str_list(value: object) -> list[str]:
    return [str(v)[:200] for v in value][:100] if isinstance(value, list) else []


def _opt_str(value: object) -> str | None:
    return str(value)[-2000:] if value else None


def parse_status(text: str) -> ChildReport:
    report = ChildReport()
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        kind = event.get("event")
        if kind == "import":
            report.import_ops = sorted(set(report.import_ops) | set(_str_list(event.get("torch_ops"))))
            report.import_error = report.import_error or _opt_str(event.get("error"))
        elif kind == "trial" and isinstance(event.get("index"), int):
            launches = event.get("launches")
            elapsed = event.get("elapsed_s")
            tr = TrialReport(
                index=event["index"],
                launches=launches if isinstance(launches, int) and not isinstance(launches, bool) else None,
                torch_ops=_str_list(event.get("torch_ops")),
                oob=bool(event.get("oob")),
                error=_opt_str(event.get("error")),
                elapsed_s=float(elapsed) if isinstance(elapsed, int | float) else None,
            )
            if tr.index in report.trials:
                report.trials[tr.index].merge(tr)
            else:
                report.trials[tr.index] = tr
        elif kind == "timing" and isinstance(event.get("index"), int):
            samples = event.get("samples_ms")
            if isinstance(samples, list) and all(isinstance(s, int | float) for s in samples):
                report.timings[event["index"]] = [float(s) for s in samples][:100_000]
        elif kind == "done":
            report.done = True
    return report


def read_status(path: Path) -> ChildReport:
    if not path.is_file():
        return ChildReport()
    with path.open("rb") as fh:
        data = fh.read(MAX_STATUS_BYTES)
    return parse_status(data.decode("utf-8", errors="replace"))
