"""``python -m orchestrator.sandbox PLAN_JSON``: run one command in a sandbox (the job executor's way in).

Runs in a fresh, single-threaded process (nothing happens in a ``preexec_fn`` of a threaded parent).
Exit status: the command's, or 121 (``SETUP_FAILED``) with one ``kswarm sandbox: ...`` line on stderr
when the sandbox could not be built -- then the command never ran.
"""

from __future__ import annotations

import sys

from orchestrator.sandbox.plan import SETUP_FAILED, SandboxPlan
from orchestrator.sandbox.spawn import run_sandboxed


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        print("usage: python -m orchestrator.sandbox PLAN_JSON", file=sys.stderr)
        sys.exit(2)
    try:
        plan = SandboxPlan.model_validate_json(argv[1])
        run_sandboxed(plan)
    except (OSError, ValueError) as exc:
        print(f"kswarm sandbox: {exc}", file=sys.stderr, flush=True)
        sys.exit(SETUP_FAILED)


if __name__ == "__main__":
    main(sys.argv)
