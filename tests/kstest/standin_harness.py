"""A stand-in for ``python -m orchestrator.verify`` in the job-runner tests.

It keeps the harness's contract (the result record at ``--out``, exit code 0 pass / 1 fail / 2 error /
3 unverifiable) and does what the candidate's ``# standin: ...`` lines say:
``sleep S``, ``verdict V``, ``connect PORT`` (report whether 127.0.0.1:PORT answered),
``marker PATH`` (append a line per run), ``crash`` (exit 2, no record), ``liar`` (record pass, exit 1),
``write PATH`` (try to write into the checkout). It records the sha256 of the task file it was handed
(``task_sha256``), and a task file's ``# standin-task: verdict V`` line overrides the candidate's verdict:
a "weaker reference" for the attack tests, which must never be the task a job is judged by.
``evidence L`` sets the record's evidence level (any string, forged ones included); without it a pass
records what the real harness records for an honest pass: ``cpu-screened`` with one passing device-shape
trial on ``--pool cpu``, ``device-verified`` elsewhere.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
import time
from pathlib import Path

EXIT = {"pass": 0, "fail": 1, "error": 2, "unverifiable": 3}
ENV_SEEN = (
    "CUDA_VISIBLE_DEVICES",
    "ASCEND_RT_VISIBLE_DEVICES",
    "SLURM_JOB_ID",
    "HOME",
    "KSWARM_SECRET_PROBE",
)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task")
    parser.add_argument("--candidate", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--pool", default="cpu")
    parser.add_argument("--timeout", default=None)
    args = parser.parse_args()
    source = Path(args.candidate).read_bytes()
    verdict, extra = "pass", {}
    task_file = Path(args.task or ".") / "task.py"
    task_bytes = task_file.read_bytes() if task_file.is_file() else b""
    extra["task_sha256"] = hashlib.sha256(task_bytes).hexdigest() if task_bytes else None
    print(f"standin: candidate {args.candidate} pool {args.pool}", flush=True)
    for line in source.decode().splitlines():
        if not line.startswith("# standin:"):
            continue
        word, _, rest = line.removeprefix("# standin:").strip().partition(" ")
        if word == "sleep":
            time.sleep(float(rest))
        elif word == "verdict":
            verdict = rest.strip()
        elif word == "connect":
            s = socket.socket()
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", int(rest)))
                extra["connect"] = "connected"
            except OSError as exc:
                extra["connect"] = f"failed: {exc}"
        elif word == "marker":
            with open(rest.strip(), "a") as fh:
                fh.write(f"{os.getpid()} {time.time()}\n")
        elif word == "crash":
            print("standin: crashing", flush=True)
            return 2
        elif word == "liar":
            Path(args.out).write_text(json.dumps({"verdict": "pass"}))
            return 1
        elif word == "write":
            try:
                Path(args.candidate).write_text("overwritten")
                extra["write"] = "written"
            except OSError as exc:
                extra["write"] = f"failed: {exc}"
        elif word == "spam":
            sys.stdout.write("x" * int(rest))
        elif word == "evidence":
            extra["evidence"] = rest.strip()
    for line in task_bytes.decode(errors="replace").splitlines():
        if line.startswith("# standin-task: verdict "):
            verdict = line.removeprefix("# standin-task: verdict ").strip()
    if verdict == "pass":
        extra.setdefault("evidence", "cpu-screened" if args.pool == "cpu" else "device-verified")
        if args.pool == "cpu":  # the record backs a cpu-screened level as the harness's does
            device_trial = {"index": 0, "shape": {"n": 65536}, "dtype": "float32", "seed": 0, "ok": True,
                            "max_abs_err": 0.0, "flags": [], "device_shape": True}  # fmt: skip
            extra.setdefault("trials", [device_trial])
    record = {
        "verdict": verdict,
        "candidate_sha256": hashlib.sha256(source).hexdigest(),
        "reasons": [] if verdict == "pass" else [f"standin said {verdict}"],
        "flags": [] if verdict == "pass" else ["mismatch"],
        "env": {k: os.environ.get(k) for k in ENV_SEEN},
        "uid": os.getuid(),
        **extra,
    }
    Path(args.out).write_text(json.dumps(record))
    print(f"standin: {verdict}", flush=True)
    return EXIT[verdict]


if __name__ == "__main__":
    sys.exit(main())
