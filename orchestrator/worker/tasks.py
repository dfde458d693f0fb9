"""Where a job's task definition comes from on the worker, and its cache.

A pool with ``tasks_dir`` is an operator-local pool: its worker reads ``<tasks_dir>/<task>/task.py``
and nothing else. Every other pool's worker asks the gateway for the job's task
(``GET /api/tasks/{task}/definition?repo=``): ``tasks/<task>/task.py`` on the job repo's protected main
at its current head — the commit the gate will merge onto, never the PR's head — when main is a
trusted dataset branch, else the gateway's catalogue (``gateway/tasks/definitions.py``). The file is
cached by its git blob sha (``<workdir>/tasks/<blob>/<task>/task.py``, read-only, checked against
the sha before use), so a task changes for the next job the moment it changes on main, without a
restart, and an unchanged one is fetched once. The task's regression cases (issue 27) come with it and
are stored beside it, ``<task>/regressions/<id>.json``, each checked against its blob sha; the cache key
covers them (``definition_key``), so a case merged on main gives the next job a fresh dir. The job's
result records where its task came from (``task_source``: source, repo, commit, path, blob sha, the
regression case ids).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gateway.client import AsyncGatewayClient, GatewayCallError
from gateway.client.jobs.models import Job
from gateway.client.jobs.pools import PoolConfig
from gateway.tasks.models import RegressionFile, TaskDefinition, definition_key
from kswarm_contracts.counterexample import COUNTEREXAMPLE_ID_RE as REGRESSION_ID_RE
from kswarm_contracts.counterexample import REGRESSIONS_DIR


class TaskUnavailable(RuntimeError):
    """The job's task cannot be had (not on main, not in the catalogue, or a corrupt answer)."""


def blob_sha(content: bytes) -> str:
    """Git's blob id of ``content``."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


class TaskCache:
    """Task dirs under ``<root>/<key>/<task>/``: task.py and ``regressions/<id>.json``, read-only, each
    file checked against its blob sha before every use. The key is ``definition_key``: task.py's blob
    sha alone without regression cases (the layout before them), else a hash over it and the cases."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, blob: str, task: str) -> Path:
        return self.root / blob / task / "task.py"

    @staticmethod
    def usable(meta: TaskDefinition) -> list[RegressionFile]:
        return [r for r in meta.regressions if r.error is None]

    def cached(self, blob: str, task: str, regressions: list[RegressionFile] | None = None) -> Path | None:
        """The task dir for this definition if it is stored whole and unaltered, else None."""
        wanted = {r.id: r.blob_sha for r in regressions or []}
        key = definition_key(blob, list(regressions or []))
        path = self.root / key / task / "task.py"
        try:
            if not (path.is_file() and not path.is_symlink() and blob_sha(path.read_bytes()) == blob):
                return None
            cases = path.parent / REGRESSIONS_DIR
            if not wanted:
                return path.parent if not cases.exists() else None
            if cases.is_symlink() or not cases.is_dir():
                return None
            stored = sorted(p.name for p in cases.iterdir())
            if stored != sorted(f"{cid}.json" for cid in wanted):
                return None
            for cid, sha in wanted.items():
                case = cases / f"{cid}.json"
                if case.is_symlink() or not case.is_file() or blob_sha(case.read_bytes()) != sha:
                    return None
        except OSError:
            return None
        return path.parent

    def store(
        self, blob: str, task: str, content: bytes, regressions: list[RegressionFile] | None = None
    ) -> Path:
        """Write a verified task dir under its key: to a temporary dir, then renamed into place."""
        if blob_sha(content) != blob:
            raise TaskUnavailable(f"task {task}: the gateway's content does not hash to blob {blob[:12]}")
        cases = list(regressions or [])
        for case in cases:
            data = (case.content or "").encode()
            if not REGRESSION_ID_RE.match(case.id) or blob_sha(data) != case.blob_sha:
                raise TaskUnavailable(
                    f"task {task}: regression case {case.id!r} does not hash to blob {case.blob_sha[:12]}"
                )
        final = self.root / definition_key(blob, cases)
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o711)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.root))
        try:
            (tmp / task).mkdir()
            (tmp / task / "task.py").write_bytes(content)
            (tmp / task / "task.py").chmod(0o444)
            if cases:
                (tmp / task / REGRESSIONS_DIR).mkdir()
                for case in cases:
                    (tmp / task / REGRESSIONS_DIR / f"{case.id}.json").write_bytes(
                        (case.content or "").encode()
                    )
                    (tmp / task / REGRESSIONS_DIR / f"{case.id}.json").chmod(0o444)
                (tmp / task / REGRESSIONS_DIR).chmod(0o555)
            try:
                os.rename(tmp, final)
            except OSError:  # another job stored the same definition first: keep theirs if it is whole
                if self.cached(blob, task, cases) is None:
                    raise
            else:
                (final / task).chmod(0o555)  # jobs (another uid) read it; nobody writes it
                final.chmod(0o555)
        finally:
            if tmp.exists():
                for sub in tmp.rglob("*"):  # read-only dirs left by a lost race: writable to remove
                    if sub.is_dir() and not sub.is_symlink():
                        sub.chmod(0o755)
                tmp.chmod(0o755)
            shutil.rmtree(tmp, ignore_errors=True)
        found = self.cached(blob, task, cases)
        if found is None:
            raise TaskUnavailable(f"task {task}: cache entry {final} is not the definition it should hold")
        return found

    async def for_job(
        self, pool: PoolConfig, job: Job, gateway: AsyncGatewayClient
    ) -> tuple[Path, dict[str, Any]]:
        """(task dir to hand the harness, where it came from). A pool with ``tasks_dir`` reads what is
        there (its own ``regressions/`` too, if the operator put one)."""
        if pool.tasks_dir is not None:
            local = pool.task_root() / job.task
            if not (local / "task.py").is_file():
                raise TaskUnavailable(f"pool {pool.name} has no task {job.task!r} in its tasks_dir")
            data = (local / "task.py").read_bytes()
            own_cases = local / REGRESSIONS_DIR
            ids = sorted(p.stem for p in own_cases.glob("*.json")) if own_cases.is_dir() else []
            own: dict[str, Any] = {"source": "pool", "path": str(local / "task.py")}
            own["blob_sha"] = blob_sha(data)
            if ids:
                own["regressions"] = ids
            return local, own
        path = f"/api/tasks/{job.task}/definition"
        try:  # the cheap path first: where it is and the blob shas, no content
            meta = TaskDefinition.model_validate(await gateway.get(path, repo=job.repo, content="false"))
            found = self.cached(meta.blob_sha, job.task, self.usable(meta))
            if found is None:
                meta = TaskDefinition.model_validate(await gateway.get(path, repo=job.repo))
                cases = self.usable(meta)
                found = self.store(meta.blob_sha, job.task, (meta.content or "").encode(), cases)
        except GatewayCallError as exc:
            raise TaskUnavailable(f"task {job.task!r} for {job.repo}: {exc}") from None
        except ValidationError as exc:
            raise TaskUnavailable(f"task {job.task!r} for {job.repo}: a malformed answer: {exc}") from None
        source: dict[str, Any] = {
            "source": meta.source,
            "repo": meta.repo,
            "commit": meta.commit,
            "path": meta.path,
            "blob_sha": meta.blob_sha,
        }
        if self.usable(meta):  # the cases the harness runs (absent: none, as before issue 27)
            source["regressions"] = [r.id for r in self.usable(meta)]
        skipped = [r.error for r in meta.regressions if r.error is not None]
        if skipped:
            source["regressions_skipped"] = skipped
        return found, source
