"""On a machine with a GPU: which cpu-pool verdicts of issue 22 does the device confirm?

Run: ``.venv/bin/python bench/device_check.py [--pool cuda] [--out DIR]`` (one short run; it needs a
CUDA device and prints one line per candidate, then writes ``device_check.json`` to DIR).

1. Every catalogue solution on the device pool (they must pass there: ``device-verified``).
2. The divergence cases of the regression suite -- kernels the cpu pool now rejects for what Triton
   leaves unspecified (false hints, non-associative combines, tie order, inputs used as scratch) or
   for device shapes -- on the device pool: a `fail` there confirms the cpu pool's flag; a `pass`
   means the device happened to behave like the interpreter (the flag guards a behaviour the language
   allows, which this device did not show this time).
3. TF32: the static gate's ``tf32_dot`` rule says a float32 ``tl.dot`` without
   ``input_precision="ieee"`` is off by ~1e-3 on a GPU; the matmul cheat with the default precision is
   run with the static gate advisory so the device's values decide.

Record what it printed in docs/verification.md ("Issue 22" -> the device run) with the date.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from orchestrator.verify import verify  # noqa: E402

CATALOGUE = ROOT / "gateway" / "tasks" / "catalogue"
VERIFY_TESTS = ROOT / "tests" / "orchestrator" / "verify"
CHEATS = VERIFY_TESTS / "cheats"
TASKS = CATALOGUE / "tasks"
# (task dir, candidate, the cpu pool's flag, static gate enforced)
DIVERGENCE = [
    (TASKS / "add", CHEATS / "unspecified" / "false_multiple_of.py", "false_hint", True),
    (TASKS / "add", CHEATS / "unspecified" / "aligned_pointers.py", "false_hint", True),
    (TASKS / "embedding", CHEATS / "unspecified" / "contiguous_gather.py", "false_hint", True),
    (TASKS / "mean_rows", CHEATS / "unspecified" / "welford_mean.py", "non_associative_combine", True),
    (
        VERIFY_TESTS / "unspecified_tasks" / "ema_rows",
        CHEATS / "unspecified" / "ema_left_fold.py",
        "non_associative_combine",
        True,
    ),
    (TASKS / "argmax_rows", CHEATS / "unspecified" / "argmax_fast_ties.py", "tie_dependent", True),
    (TASKS / "softmax", CHEATS / "unspecified" / "input_as_scratch.py", "input_written", True),
    (TASKS / "softmax", CHEATS / "device_shapes" / "truncated_block.py", "device_shapes", True),
    (TASKS / "add", CHEATS / "device_shapes" / "short_grid.py", "device_shapes", True),
    (TASKS / "sum_rows", CHEATS / "device_shapes" / "narrow_index.py", "device_shapes", True),
    (TASKS / "matmul", CHEATS / "static" / "matmul_tf32_default.py", "tf32_dot", False),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default="cuda")
    parser.add_argument("--out", default=".")
    args = parser.parse_args()
    rows = []
    for solution in sorted((CATALOGUE / "solutions").glob("*.py")):
        result = verify(TASKS / solution.stem, solution, args.pool)
        rows.append({"kind": "catalogue", "task": solution.stem, "verdict": result.verdict,
                     "evidence": result.evidence, "flags": list(result.flags)})  # fmt: skip
        print(f"catalogue  {solution.stem:<22} {result.verdict:<12} {result.evidence}", flush=True)
    for task, candidate, cpu_flag, enforce in DIVERGENCE:
        result = verify(task, candidate, args.pool, enforce_static=enforce)
        confirmed = result.verdict == "fail"
        rows.append({"kind": "divergence", "task": task.name, "candidate": candidate.name,
                     "cpu_flag": cpu_flag, "verdict": result.verdict, "flags": list(result.flags),
                     "device_confirms": confirmed})  # fmt: skip
        seen = "(confirms)" if confirmed else "(device behaved like the interpreter)"
        print(
            f"divergence {candidate.stem:<22} cpu: {cpu_flag:<24} device: {result.verdict} {seen}", flush=True
        )
    out = Path(args.out) / "device_check.json"
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M %Z"), "rows": rows}, indent=1))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
