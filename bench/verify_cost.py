"""What a candidate's verification costs on the cpu pool, this tree against a baseline commit.

Run: ``.venv/bin/python bench/verify_cost.py [--baseline REF] [--repeats N] [--tasks add,softmax,...]
[--candidate TASK=FILE ...]``

Issue 22 point 8: the cpu pool explores more than it did (unguarded calls, hints, ties, association
orders, autotune configs, the task's device shapes), and a candidate's median verification must stay
within 2x of what it cost before. Both trees run here, interleaved, in the same minutes and on the
same machine: the baseline is ``git archive REF`` unpacked into a temporary directory and run with
this venv (``PYTHONPATH`` set to it; the run checks which tree it imported). Each run is the CLI a
job worker runs (``python -m orchestrator.verify --pool cpu``) on a catalogue solution, timed from
start to exit; the table prints medians per task and the ratio this tree / baseline. ``--candidate
sum_rows=tests/orchestrator/verify/honest/last_block_sum.py`` adds a candidate of your own (the same
file for both trees), e.g. the honest atomic kernels whose programs now run interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ROOT / "gateway" / "tasks" / "catalogue"
DEFAULT_TASKS = "add,softmax,sum_rows,matmul,rmsnorm"


def unpack(ref: str, into: Path) -> Path:
    archive = into / "tree.tar"
    with archive.open("wb") as fh:
        subprocess.run(["git", "-C", str(ROOT), "archive", ref], stdout=fh, check=True)
    tree = into / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def run_once(tree: Path, task: str, out: Path, candidate: Path | None = None) -> tuple[float, str, str]:
    """(seconds, verdict, evidence or "-") of one CLI run of ``task``'s catalogue solution in ``tree``
    (or of ``candidate``, the same file whichever tree runs it)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    solution = candidate or tree / "gateway" / "tasks" / "catalogue" / "solutions" / f"{task}.py"
    cmd = [
        sys.executable, "-P", "-m", "orchestrator.verify",
        "--task", str(tree / "gateway" / "tasks" / "catalogue" / "tasks" / task),
        "--candidate", str(solution),
        "--pool", "cpu", "--out", str(out),
    ]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = time.perf_counter() - started
    result = json.loads(out.read_text())
    if candidate is None and not result["candidate"].startswith(str(tree)):
        raise SystemExit(f"the run in {tree} verified {result['candidate']}: wrong tree imported")
    return elapsed, result["verdict"], result.get("evidence", "-")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="HEAD", help="the commit to compare with (default HEAD)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tasks", default=DEFAULT_TASKS)
    parser.add_argument("--candidate", action="append", default=[], metavar="TASK=FILE")
    args = parser.parse_args()
    runs: list[tuple[str, str, Path | None]] = [(t, t, None) for t in args.tasks.split(",") if t]
    for spec in args.candidate:
        task, _, file = spec.partition("=")
        if not file or not Path(file).is_file():
            parser.error(f"--candidate {spec}: expected TASK=FILE with an existing file")
        runs.append((f"{task}:{Path(file).stem}", task, Path(file).resolve()))
    load = os.getloadavg()[0]
    print(f"{time.strftime('%Y-%m-%d %H:%M %Z')}  load {load:.2f}  baseline {args.baseline}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        base = unpack(args.baseline, Path(tmp))
        times: dict[tuple[str, str], list[float]] = {}
        seen: dict[tuple[str, str], str] = {}
        for repeat in range(args.repeats):
            for label, task, candidate in runs:
                for name, tree in (("baseline", base), ("this tree", ROOT)):
                    seconds, verdict, evidence = run_once(tree, task, Path(tmp) / "result.json", candidate)
                    times.setdefault((label, name), []).append(seconds)
                    seen[(label, name)] = f"{verdict}/{evidence}"
                    step = f"[{repeat + 1}/{args.repeats}]"
                    print(f"  {step} {label:<10} {name:<9} {seconds:6.2f} s  {verdict}")
    print(f"\n{'task':<10} {'baseline':>10} {'this tree':>10} {'ratio':>7}  verdicts (baseline | this tree)")
    ratios = []
    for task, _, _ in runs:
        b = statistics.median(times[(task, "baseline")])
        t = statistics.median(times[(task, "this tree")])
        ratios.append(t / b)
        print(
            f"{task:<10} {b:9.2f}s {t:9.2f}s {t / b:6.2f}x  "
            f"{seen[(task, 'baseline')]} | {seen[(task, 'this tree')]}"
        )
    print(f"median ratio {statistics.median(ratios):.2f}x  (load now {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
