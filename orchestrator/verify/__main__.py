"""CLI: ``python -m orchestrator.verify --task DIR --candidate FILE --pool cpu --out result.json``.

Exit codes: 0 pass, 1 fail, 2 error (crash, timeout, or a broken task/candidate path), 3 unverifiable.

``--counterexample-input FILE.json`` (a CounterexampleInput) or ``--counterexample-generator FILE.py``
judges the kernel on that input (or the generator's inputs) only; the result's ``counterexample`` says
whether it is confirmed, refused (and why) or could not be run. The exit code is still the verdict's
(1 when confirmed: the kernel fails on it; 3 when no input could be judged).

The fork server's zygote is started before the harness itself is imported: its imports of torch and
Triton run while this process imports them too and runs the static gate and the reference.

``--warm --pool P`` starts all of that before the job exists (a worker's warm start, docs/jobs.md):
once the harness is imported and the zygote started, it reads the job's own arguments (the options
above, as one JSON list on one line of stdin) and runs it. End of input without a line: exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from types import MappingProxyType

from orchestrator.verify.forkserver import ForkServer, make_undumpable
from orchestrator.verify.pools import pool_spec
from orchestrator.verify.reaping import become_subreaper, reap_children

EXIT_CODES = MappingProxyType({"pass": 0, "fail": 1, "error": 2, "unverifiable": 3})


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.verify", description=__doc__)
    parser.add_argument("--task", type=Path, help="task directory (holds task.py); required")
    parser.add_argument("--candidate", type=Path, help="candidate module (.py); required")
    parser.add_argument(
        "--warm", action="store_true", help="start up, then read the job's arguments (a JSON list) from stdin"
    )
    parser.add_argument("--pool", default="cpu", help="cpu (Triton interpreter), cuda or npu")
    parser.add_argument("--out", type=Path, help="write the result JSON here (default: stdout)")
    parser.add_argument("--timeout", type=float, default=None, help="child wall-clock limit in seconds")
    parser.add_argument("--no-timing", action="store_true", help="skip timing on device pools")
    parser.add_argument(
        "--static-advisory",
        action="store_true",
        help="report static violations without failing on them (diagnostics only, never for acceptance)",
    )
    replay = parser.add_mutually_exclusive_group()
    replay.add_argument(
        "--seeds", help="comma-separated trial seeds to replay (a result's `seeds`); default: fresh per job"
    )
    replay.add_argument("--seed-base", type=int, help="replay the seeds of a result's `seed_base`")
    counter = parser.add_mutually_exclusive_group()
    counter.add_argument(
        "--counterexample-input",
        type=Path,
        help="judge the kernel on this input only (CounterexampleInput JSON)",
    )
    counter.add_argument(
        "--counterexample-generator",
        type=Path,
        help="judge the kernel on the inputs this script's generate(domain, seed) returns (run sandboxed)",
    )
    return parser


def _job_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    if not args.warm and (args.task is None or args.candidate is None):
        parser.error("--task and --candidate are required")
    return args


def _warm_job(parser: argparse.ArgumentParser, pool: str) -> argparse.Namespace | None:
    """The job's arguments, once it comes: one JSON list of strings on stdin (None: none came)."""
    line = sys.stdin.readline()
    if not line:
        return None
    try:
        argv = json.loads(line)
    except ValueError:
        parser.error("warm start: the job's arguments are not JSON")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        parser.error("warm start: the job's arguments must be a JSON list of strings")
    args = _job_args(parser, argv)
    if args.warm or args.pool != pool:
        parser.error(f"warm start: the job must run on pool {pool!r}, without --warm")
    return args


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = _job_args(parser, argv)
    make_undumpable()  # the candidate runs as this uid: it must not reach this process's memory
    # A candidate that kills its zygote orphans what it started: as a subreaper, this process adopts
    # those orphans and kills them before it exits (nothing of the candidate outlives the job).
    become_subreaper()
    try:
        interpret = pool_spec(args.pool).interpret
    except ValueError as exc:
        print(f"verify: {exc}", file=sys.stderr)
        return EXIT_CODES["error"]
    try:
        with ForkServer(interpret=interpret) as server:
            _import_harness()  # torch: while the zygote imports it too
            if args.warm:
                job = _warm_job(parser, args.pool)
                if job is None:
                    return EXIT_CODES["error"]
                args = job
            return _verify(args, server)
    finally:
        reap_children()


def _import_harness() -> None:
    import orchestrator.verify.counterexample
    import orchestrator.verify.harness  # noqa: F401


def _verify(args: argparse.Namespace, server: ForkServer) -> int:
    from orchestrator.verify.counterexample import CounterexampleRun
    from orchestrator.verify.harness import verify
    from orchestrator.verify.seeds import parse_seeds
    from orchestrator.verify.tasks import TaskError

    try:
        seeds = parse_seeds(args.seeds) if args.seeds is not None else None
        counterexample = None
        if args.counterexample_input is not None:
            counterexample = CounterexampleRun(input_json=_read_text(args.counterexample_input))
        elif args.counterexample_generator is not None:
            counterexample = CounterexampleRun(generator=_read_text(args.counterexample_generator))
        result = verify(
            args.task,
            args.candidate,
            args.pool,
            timeout_s=args.timeout,
            enforce_static=not args.static_advisory,
            timing=False if args.no_timing else None,
            seeds=seeds,
            seed_base=args.seed_base,
            server=server,
            counterexample=counterexample,
        )
    except (TaskError, ValueError, OSError, RuntimeError) as exc:
        print(f"verify: {exc}", file=sys.stderr)
        return EXIT_CODES["error"]
    text = result.model_dump_json(indent=2)
    if args.out:
        # Written by the parent after the child is gone: nothing the candidate did can touch it.
        _write_atomic(args.out, text + "\n")
    else:
        print(text)
    print(f"{result.verdict}: {'; '.join(result.reasons) or 'ok'}", file=sys.stderr)
    child = result.child
    if result.verdict == "error" and child is not None and child.stderr_tail and not child.completed:
        # Why the child died (an ImportError, a segfault's message): the job's log is where the
        # submitter and the operator look, and the result record alone only says "abnormally".
        print(
            f"the child's stderr, last lines:\n{_printable(child.stderr_tail[-_CHILD_TAIL:])}",
            file=sys.stderr,
        )
    return EXIT_CODES[result.verdict]


_CHILD_TAIL = 2000
# A counterexample file is read only this far: the generator's own bound is checked on its source.
_COUNTEREXAMPLE_FILE_BYTES = 1 << 20


def _read_text(path: Path) -> str:
    with path.open("rb") as fh:
        return fh.read(_COUNTEREXAMPLE_FILE_BYTES + 1).decode("utf-8", errors="replace")


def _printable(text: str) -> str:
    """The candidate wrote it: no control characters reach a terminal but newlines and tabs."""
    return "".join(c if c.isprintable() or c in "\n\t" else "?" for c in text)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The result is written and the fork server closed: skip the interpreter's teardown (torch's
    # modules take about half a second to free). Only the parent does this; the child exits normally.
    os._exit(code)
