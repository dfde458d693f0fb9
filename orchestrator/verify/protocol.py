"""Parent <-> child protocol: length-prefixed frames on two private pipes.

Parent -> child: the plan's header (JSON), then for every trial its own plan (JSON) and its inputs
(and refill values) as torch.save blobs -- each trial only after the child reported the one before it,
so no future call's schedule is ever in the child -- and finally ``{"end": true}``. Child -> parent:
JSON events (one per import, trial, timing, done), each trial's event followed by one blob with
everything the candidate returned. Nothing touches the file system, so the child's working directory
stays empty and nothing can be rewritten after it was sent.

The child's side runs where candidate code runs, so the parent parses it defensively and merges
pessimistically: a report can add suspicion, never remove it (two reports for one trial, or a blob
without its event, are themselves evidence of tampering).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

JSON, BLOB = b"J", b"B"
HEADER = 9  # kind (1 byte) + length (8 bytes, big-endian)
MAX_JSON_BYTES = 4 << 20


def encode_frame(kind: bytes, payload: bytes) -> bytes:
    return kind + len(payload).to_bytes(8, "big") + payload


def write_frame(fd: int, kind: bytes, payload: bytes) -> None:
    data = memoryview(encode_frame(kind, payload))
    while data:
        written = os.write(fd, data)
        data = data[written:]


def write_json(fd: int, event: Mapping[str, Any]) -> None:
    write_frame(fd, JSON, json.dumps(event).encode())


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, limit: int) -> tuple[bytes, bytes] | None:
    """(kind, payload), or None at end of stream; ValueError on a malformed or oversized frame."""
    head = _read_exact(fd, HEADER)
    if head is None:
        return None
    kind, size = head[:1], int.from_bytes(head[1:], "big")
    if kind not in (JSON, BLOB):
        raise ValueError(f"bad frame kind {kind!r}")
    if size > (MAX_JSON_BYTES if kind == JSON else limit):
        raise ValueError(f"frame of {size} bytes over the limit")
    payload = _read_exact(fd, size)
    if payload is None:
        raise ValueError("stream ended inside a frame")
    return kind, payload


# --- the plan (parent -> child) --------------------------------------------------------------------


@dataclass(frozen=True)
class CallPlan:
    kind: str  # "first" | "repeat" (same inputs again) | "refill" (same buffers, new values) | "blind"
    order: str  # interpreter program order: "natural" | "reversed" | "shuffled" ("device" off the cpu)
    monitored: bool  # False: a blind call, with every instrument removed (looks like production)
    # False: inputs and allocations are plain, as in a blind call (no guard bands, no sentinels). Some
    # monitored calls are drawn so, so that what a blind call looks like tells the candidate nothing.
    guarded: bool = True


@dataclass(frozen=True)
class TrialPlan:
    index: int
    calls: list[CallPlan]
    seed: int = 0  # drives the interpreter's shuffled program orders in this trial
    timed: bool = False  # its inputs are timed after the trials (device pools)
    # A device-shape trial (cpu pool): sampling.SampleRequest.to_json(), how its programs are sampled.
    sample: dict[str, int] | None = None

    @property
    def refill(self) -> bool:
        return any(c.kind == "refill" for c in self.calls)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TrialPlan:
        return cls(
            index=int(raw["index"]),
            calls=[CallPlan(**c) for c in raw["calls"]],
            seed=int(raw.get("seed", 0)),
            timed=bool(raw.get("timed", False)),
            sample=dict(raw["sample"]) if isinstance(raw.get("sample"), dict) else None,
        )


@dataclass(frozen=True)
class Plan:
    """The header: what the whole run needs. Each trial's own plan is sent when its turn comes."""

    candidate: str
    entry: str
    device: str
    interpret: bool
    guards: dict[str, Any]  # GuardParams.to_json(): private to this job
    timing: dict[str, Any] | None = None  # the BenchConfig on device pools, when trials are timed
    # The task's ALLOW_INPUT_COPIES: host-side copies of input data are fine (else torch_compute).
    allow_input_copies: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Plan:
        return cls(**raw)


# --- reports (child -> parent) ---------------------------------------------------------------------

FINDING_KINDS: tuple[str, ...] = (
    "torch_compute",
    "host_compute",
    "tamper",
    "forbidden",
    "oob_read",
    "oob_write",
    "order",
)
# interp_semantics.py (runtime_policy.FLAG_FOR_FINDING / NOTE_FOR_FINDING)
FINDING_KINDS += ("input_write", "false_hint", "non_associative", "tie")


@dataclass
class CallReport:
    kind: str = "first"
    order: str = "natural"
    monitored: bool = True
    launches: int | None = None
    findings: dict[str, list[str]] = field(default_factory=dict)  # FINDING_KINDS -> details
    error: str | None = None
    stalled: bool = False  # a program waited on another one (interpreter)
    elapsed_s: float | None = None
    output_views: list[bool] = field(default_factory=list)  # output j is a view (_base is not None)
    output_reused: list[bool] = field(default_factory=list)  # output j shares an earlier trial's storage


@dataclass
class TrialReport:
    index: int
    calls: list[CallReport] = field(default_factory=list)
    duplicate: bool = False  # more than one report arrived for this trial: forged


@dataclass
class ChildReport:
    import_findings: dict[str, list[str]] = field(default_factory=dict)
    import_error: str | None = None
    trials: dict[int, TrialReport] = field(default_factory=dict)
    blobs: dict[int, bytes] = field(default_factory=dict)
    timings: dict[int, list[float]] = field(default_factory=dict)
    streamed: dict[tuple[int, int], dict[str, list[str]]] = field(
        default_factory=dict
    )  # sent as they happened
    done: bool = False
    stream_error: str | None = None  # malformed frames, a blob without its event, over the limit


def _str_list(value: object) -> list[str]:
    return [str(v)[:300] for v in value][:100] if isinstance(value, list) else []


def _findings(value: object) -> dict[str, list[str]]:
    if not isinstance(value, dict):
        return {}
    return {k: _str_list(v) for k, v in value.items() if k in FINDING_KINDS and _str_list(v)}


def _bools(value: object) -> list[bool]:
    return [bool(v) for v in value][:1000] if isinstance(value, list) else []


def _opt_str(value: object) -> str | None:
    return str(value)[-2000:] if value else None


def _call(raw: object) -> CallReport:
    if not isinstance(raw, dict):
        return CallReport(error="malformed call report")
    launches = raw.get("launches")
    elapsed = raw.get("elapsed_s")
    return CallReport(
        kind=str(raw.get("kind", "first"))[:20],
        order=str(raw.get("order", "natural"))[:20],
        monitored=bool(raw.get("monitored", True)),
        launches=launches if isinstance(launches, int) and not isinstance(launches, bool) else None,
        findings=_findings(raw.get("findings")),
        error=_opt_str(raw.get("error")),
        stalled=bool(raw.get("stalled")),
        elapsed_s=float(elapsed) if isinstance(elapsed, int | float) else None,
        output_views=_bools(raw.get("output_views")),
        output_reused=_bools(raw.get("output_reused")),
    )


class ReportBuilder:
    """Feeds frames from the child's pipe into a ChildReport (pessimistically).

    ``on_blob(index, blob, report)``, when given, receives each trial's blob as it arrives (the parent judges
    it right away and keeps no copy: on device pools a trial's blob can weigh hundreds of MB).
    """

    def __init__(
        self,
        on_blob: Callable[[int, bytes, ChildReport], None] | None = None,
        order: Sequence[int] | None = None,
    ) -> None:
        self.report = ChildReport()
        self.progress = 0  # import and trial events received (the parent sends the next trial then)
        # The trial indices in the order they are sent: the n-th trial report must be about the n-th
        # trial (a report for another index would only make the parent send the next plan early).
        self._order = list(order) if order is not None else None
        self._trials_reported = 0
        self._awaiting_blob: int | None = None
        self._on_blob = on_blob

    def feed(self, kind: bytes, payload: bytes) -> None:
        report = self.report
        if kind == BLOB:
            index, self._awaiting_blob = self._awaiting_blob, None
            if index is None or index in report.blobs:
                report.stream_error = report.stream_error or "an output blob arrived without its trial event"
                return
            if self._on_blob is None:
                report.blobs[index] = payload
            else:
                report.blobs[index] = b""  # received (and judged): a second one is a forgery
                self._on_blob(index, payload, report)
            return
        if self._awaiting_blob is not None:
            report.stream_error = report.stream_error or "a trial event arrived without its output blob"
            self._awaiting_blob = None
        try:
            event = json.loads(payload.decode("utf-8", errors="replace"))
        except ValueError:
            report.stream_error = report.stream_error or "malformed event"
            return
        if not isinstance(event, dict):
            return
        name = event.get("event")
        if name == "import":
            self.progress += 1
            if self.progress > 1:
                report.stream_error = report.stream_error or "more than one import report (forged)"
            for k, v in _findings(event.get("findings")).items():
                report.import_findings[k] = sorted(set(report.import_findings.get(k, [])) | set(v))
            report.import_error = report.import_error or _opt_str(event.get("error"))
        elif name == "finding":
            self._finding(event)
        elif name == "trial" and isinstance(event.get("index"), int):
            self.progress += 1
            index = event["index"]
            number, self._trials_reported = self._trials_reported, self._trials_reported + 1
            if self._order is not None and (number >= len(self._order) or self._order[number] != index):
                report.stream_error = report.stream_error or f"a report for trial {index}, not the one sent"
            calls = [_call(c) for c in event.get("calls", [])] if isinstance(event.get("calls"), list) else []
            for number, call in enumerate(calls):  # what was streamed stays, whatever the summary says
                for finding, details in report.streamed.get((index, number), {}).items():
                    call.findings[finding] = sorted(set(call.findings.get(finding, [])) | set(details))
            if index in report.trials:
                report.trials[index].duplicate = True
                report.trials[index].calls += calls
            else:
                report.trials[index] = TrialReport(index, calls)
            if event.get("blob"):
                self._awaiting_blob = index
        elif name == "timing" and isinstance(event.get("index"), int):
            samples = event.get("samples_ms")
            if isinstance(samples, list) and all(isinstance(s, int | float) for s in samples):
                report.timings[event["index"]] = [float(s) for s in samples][:100_000]
        elif name == "done":
            report.done = True

    def _finding(self, event: Mapping[str, Any]) -> None:
        kind, detail = event.get("kind"), str(event.get("detail"))[:300]
        if kind not in FINDING_KINDS:
            return
        trial, call = event.get("trial"), event.get("call")
        if trial is None:
            bucket = self.report.import_findings.setdefault(str(kind), [])
        elif isinstance(trial, int) and isinstance(call, int):
            bucket = self.report.streamed.setdefault((trial, call), {}).setdefault(str(kind), [])
        else:
            return
        if detail not in bucket and len(bucket) < 100:
            bucket.append(detail)
