"""The gate's rule for regression cases: ``tasks/<task>/regressions/<id>.json`` on a dataset branch.

Regression files sit under ``tasks/``, which is operator-only (``kernels.DEFAULT_TRUSTED_PATHS``), so
``classify`` blocks them like any trusted file. This rule then looks again at each one an agent's PR
adds or changes: it is admitted only when its bytes at the PR's head equal the ``RegressionCase`` of a
confirmed counterexample in the store (``RegressionSource``, given by the counterexample component);
a hand-written case, an edited one, one whose counterexample is pending or refused, and one of another
path keep their block. Deleting a regression file stays an operator's change (an operator's vouched
PR is never blocked, ``kernels.classify``). Without a source (no counterexample component) nothing is
admitted: the block stands, failing closed. Such a PR changes no kernel, so it needs no verification,
only the normal approvals.
"""

from __future__ import annotations

import re
from typing import Protocol

from gateway.forge.gate.kernels import BlockedPath, PRChanges
from gateway.forge.models import PullRequest
from gateway.forge.protocol import Forge
from kswarm_contracts.counterexample import REGRESSIONS_DIR

REGRESSION_RE = re.compile(
    rf"^tasks/([a-z0-9][a-z0-9_.-]{{0,63}})/{REGRESSIONS_DIR}/(cx[0-9a-f]{{12,24}})\.json$"
)
REGRESSION_FILE_MAX = 64_000  # a case is a few hundred bytes; a larger file is no case


def regression_path(task: str, cx_id: str) -> str:
    return f"tasks/{task}/{REGRESSIONS_DIR}/{cx_id}.json"


def parse_regression_path(path: str) -> tuple[str, str] | None:
    """(task, counterexample id) of a regression file's path, else None."""
    found = REGRESSION_RE.match(path)
    return (found.group(1), found.group(2)) if found else None


def in_regressions(path: str) -> bool:
    """Anything under some ``tasks/<task>/regressions/`` (a well-formed case path or not)."""
    parts = path.split("/")
    return len(parts) >= 4 and parts[0] == "tasks" and parts[2] == REGRESSIONS_DIR


class RegressionSource(Protocol):
    async def expected(self, repo: str, path: str) -> bytes | None:
        """The bytes ``path`` must have in ``repo``: a confirmed counterexample's case; None if none."""
        ...


async def admit_regressions(
    forge: Forge, pr: PullRequest, changes: PRChanges, source: RegressionSource | None
) -> None:
    """Lift the trusted-path block of each regression file ``pr`` adds or changes whose bytes at the head
    are a confirmed counterexample's case; say why the others stay blocked."""
    if pr.head_sha is None:
        return
    status = {f.path: f.status for f in changes.files}
    kept: list[BlockedPath] = []
    for blocked in changes.blocked:
        path = blocked.path
        if not in_regressions(path):
            kept.append(blocked)
            continue
        if status.get(path) == "deleted":
            why = f"{path} deletes a regression case: only operators remove one, on main"
            kept.append(BlockedPath(path=path, why=why))
            continue
        want = await source.expected(pr.full_name, path) if source is not None else None
        if want is None:
            why = (
                f"{path} is no confirmed counterexample's regression case: cases are added only by the "
                "gateway's PR for a confirmed counterexample (counterexample_submit), never written by hand"
            )
            kept.append(BlockedPath(path=path, why=why))
            continue
        found = await forge.read_file(pr.org, pr.repo, pr.head_sha, path, max_bytes=REGRESSION_FILE_MAX)
        if found is None or found.content != want:
            why = (
                f"{path} differs from the regression case of counterexample "
                f"{path.rsplit('/', 1)[-1].removesuffix('.json')} as confirmed: a case is never edited"
            )
            kept.append(BlockedPath(path=path, why=why))
    changes.blocked = kept
