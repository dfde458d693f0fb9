"""Parent side of one child run: a fresh fork of the fork server's zygote (forkserver.py).

The child's program is the zygote's bootstrap; the harness's own child-side modules and the plan's
header arrive on its private plan pipe after the fork, and it loads them from source under per-job
random file names and removes them from ``sys.modules`` before the candidate is imported, so nothing
named after the harness is importable or listed. Inputs, reports and outputs travel on pipes too: the
child's working directory and home are empty temporary directories, its environment holds only what a
production process has (PATH, device selection, HOME, locale), argv is neutral.

The plan is sent in lockstep: a trial's own plan (its calls, program-order seed) and inputs only once
the child has reported the trial before it (and, for the first, the candidate's import), so the child
never holds the schedule of a call that has not come yet.

It runs in its own session (the whole process group is killed on timeout and after exit, and the
zygote kills whatever else it started), with no core dumps and a file-size limit; the parent drains
stdout/stderr itself (a tail is kept).
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.verify import protocol as proto
from orchestrator.verify.forkserver import ForkServer, ForkServerError

HERE = Path(__file__).resolve().parent
# Child-side modules in dependency order (each imports only the ones before it, torch and triton).
BUNDLE = (
    "runtime_policy",
    "protocol",
    "guards",
    "attribution",
    "monitor",
    "hostguards",
    "integrity",
    "interp_semantics",
    "sampling",
    "interp_schedule",
    "interp",
    "interp_autotune",
    "timing",
    "runner",
)
STDERR_TAIL = 4000


@dataclass(frozen=True)
class TrialFrames:
    """What the child receives for one trial: its plan (JSON), then its input blobs."""

    index: int
    plan: bytes
    blobs: Sequence[bytes]


@dataclass(frozen=True)
class ChildRun:
    returncode: int | None
    timed_out: bool
    wall_s: float
    stderr_tail: str
    report: proto.ChildReport
    failure: str | None = None  # no exit status is known: the fork server broke or died

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None


def bundle() -> list[tuple[str, str, str]]:
    """(module name, per-job random file name, source) of every child-side module."""
    return [
        (f"orchestrator.verify.{name}", f"<{secrets.token_hex(5)}>", (HERE / f"{name}.py").read_text())
        for name in BUNDLE
    ]


class _Tail(threading.Thread):
    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd, self.data = fd, b""

    def run(self) -> None:
        while chunk := os.read(self.fd, 65536):
            self.data = (self.data + chunk)[-STDERR_TAIL:]


class _Reader(threading.Thread):
    def __init__(
        self,
        fd: int,
        limit: int,
        on_blob: Callable[[int, bytes, proto.ChildReport], None] | None,
        order: Sequence[int],
    ) -> None:
        super().__init__(daemon=True)
        self.fd, self.limit = fd, limit
        self.builder = proto.ReportBuilder(on_blob, order)
        self.progress = threading.Condition()
        self.finished = False

    def run(self) -> None:
        received = 0
        try:
            while (frame := proto.read_frame(self.fd, self.limit)) is not None:
                received += len(frame[1])
                if received > self.limit:
                    raise ValueError(f"the child sent more than {self.limit} bytes")
                self.builder.feed(*frame)
                with self.progress:
                    self.progress.notify_all()
        except Exception as exc:  # a malformed stream, or a blob the parent could not judge
            self.builder.report.stream_error = self.builder.report.stream_error or str(exc)[:300]
            # Keep draining (and ignoring): a child blocked on a full pipe would only time out.
            try:
                while os.read(self.fd, 1 << 20):
                    pass
            except OSError:
                pass
        finally:
            with self.progress:
                self.finished = True
                self.progress.notify_all()

    def reported(self, events: int, stop: threading.Event) -> bool:
        """Wait until the child has reported ``events`` import/trial events (False: it never will)."""
        with self.progress:
            self.progress.wait_for(lambda: self.builder.progress >= events or self.finished or stop.is_set())
            return self.builder.progress >= events and not stop.is_set()


class _Writer(threading.Thread):
    """Sends the header at once, then each trial once the child reported the one before it."""

    def __init__(self, fd: int, header: bytes, trials: Sequence[TrialFrames], reader: _Reader) -> None:
        super().__init__(daemon=True)
        self.fd, self.header, self.trials, self.reader = fd, header, trials, reader
        self.stop = threading.Event()

    def halt(self) -> None:
        self.stop.set()
        with self.reader.progress:
            self.reader.progress.notify_all()

    def run(self) -> None:
        try:
            proto.write_frame(self.fd, proto.JSON, self.header)
            for number, trial in enumerate(self.trials):
                if not self.reader.reported(number + 1, self.stop):  # the import, then each trial
                    return
                proto.write_frame(self.fd, proto.JSON, trial.plan)
                for payload in trial.blobs:
                    proto.write_frame(self.fd, proto.BLOB, payload)
            if self.reader.reported(len(self.trials) + 1, self.stop):
                proto.write_json(self.fd, {"end": True})
        except OSError:
            pass  # the child is gone; its exit status tells the story
        finally:
            os.close(self.fd)


def run_child(
    plan: proto.Plan,
    trials: Sequence[TrialFrames],
    *,
    server: ForkServer,
    timeout_s: float,
    limit_bytes: int,
    on_blob: Callable[[int, bytes, proto.ChildReport], None] | None = None,
) -> ChildRun:
    """Run one child to completion (or timeout): send the plan and each trial's inputs, collect reports
    (``on_blob`` receives each trial's outputs as they arrive, in the reader thread)."""
    start = time.monotonic()
    deadline = start + timeout_s
    try:
        child = server.fork(deadline)
    except ForkServerError as exc:
        return ChildRun(None, False, time.monotonic() - start, "", proto.ChildReport(), failure=str(exc))
    out_tail, err_tail = _Tail(child.stdout_r), _Tail(child.stderr_r)
    reader = _Reader(child.report_r, limit_bytes, on_blob, [t.index for t in trials])
    header = json.dumps({"modules": bundle(), "plan": plan.to_json()}).encode()
    writer = _Writer(child.plan_w, header, trials, reader)
    for thread in (out_tail, err_tail, reader, writer):
        thread.start()
    try:
        returncode, timed_out, failure = server.wait(child, deadline)
    finally:
        writer.halt()
        for thread in (reader, err_tail, out_tail):
            thread.join(timeout=10)
        writer.join(timeout=1)
        for fd in (child.report_r, child.stdout_r, child.stderr_r):
            os.close(fd)
    return ChildRun(
        returncode=returncode,
        timed_out=timed_out,
        wall_s=time.monotonic() - start,
        stderr_tail=err_tail.data.decode("utf-8", errors="replace"),
        report=reader.builder.report,
        failure=failure,
    )
