"""Where a job's task definition comes from on the worker, and its cache.

A pool with ``tasks_dir`` is an operator-local pool: its worker reads ``<tasks_dir>/<task>/task.py``
and nothing else. Every other pool's worker asks the gateway for the job's task
(``GET /api/tasks/{task}/definition?repo=``): ``tasks/<task>/task.py`` on the job repo's protected main
at its current head — the commit the gate will merge onto, never the PR's head — when main is a
trusted dataset branch, else the gateway's catalogue (``gateway/tasks/definitions.py``). The file is
cached by its git blob sha (``<workdir>/tasks/<blob>/<task>/task.py``, read-only, checked against
the sha before use), so a task changes for the next job the moment it changes on main, without a
restart, and an unchanged one is fetched once. The job's result records where its task came from
(``task_source``: source, repo, commit, path, blob sha).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from gateway.client import AsyncGatewayClient, GatewayCallError
from gateway.client.jobs.models import Job
from gateway.client.jobs.pools import PoolConfig
from gateway.tasks.models import TaskDefinition


class TaskUnavailable(RuntimeError):
    """The job's task cannot be had (not on main, not in the catalogue, or a corrupt answer)."""


def blob_sha(content: bytes) -> str:
    """Git's blob id of ``content``."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


class TaskCache:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, blob: str, task: str) -> Path:
        return self.root / blob / task / "task.py"

    def cached(self, blob: str, task: str) -> Path | None:
        path = self.path(blob, task)
        try:
            if path.is_file() and not path.is_symlink() and blob_sha(path.read_bytes()) == blob:
                return path.parent
        except OSError:
            return None
        return None

    def store(self, blob: str, task: str, content: bytes) -> Path:
        """Write a verified file under its blob sha: to a temporary dir, then renamed into place."""
        if blob_sha(content) != blob:
            raise TaskUnavailable(f"task {task}: the gateway's content does not hash to blob {blob[:12]}")
        final = self.root / blob
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o711)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.root))
        try:
            (tmp / task).mkdir()
            (tmp / task / "task.py").write_bytes(content)
            (tmp / task / "task.py").chmod(0o444)
            try:
                os.rename(tmp, final)
            except OSError:  # another job stored the same blob first: keep theirs if it is whole
                if self.cached(blob, task) is None:
                    raise
            else:
                (final / task).chmod(0o555)  # jobs (another uid) read it; nobody writes it
                final.chmod(0o555)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        found = self.cached(blob, task)
        if found is None:
            raise TaskUnavailable(f"task {task}: cache entry {final} is not the blob it should hold")
        return found

    async def for_job(
        self, pool: PoolConfig, job: Job, gateway: AsyncGatewayClient
    ) -> tuple[Path, dict[str, Any]]:
        """(task dir to hand the harness, where it came from)."""
        if pool.tasks_dir is not None:
            local = pool.task_root() / job.task
            if not (local / "task.py").is_file():
                raise TaskUnavailable(f"pool {pool.name} has no task {job.task!r} in its tasks_dir")
            data = (local / "task.py").read_bytes()
            return local, {"source": "pool", "path": str(local / "task.py"), "blob_sha": blob_sha(data)}
        path = f"/api/tasks/{job.task}/definition"
        try:
            meta = TaskDefinition.model_validate(await gateway.get(path, repo=job.repo, content="false"))
            found = self.cached(meta.blob_sha, job.task)
            if found is None:
                meta = TaskDefinition.model_validate(await gateway.get(path, repo=job.repo))
                found = self.store(meta.blob_sha, job.task, (meta.content or "").encode())
        except GatewayCallError as exc:
            raise TaskUnavailable(f"task {job.task!r} for {job.repo}: {exc}") from None
        source = {
            "source": meta.source,
            "repo": meta.repo,
            "commit": meta.commit,
            "path": meta.path,
            "blob_sha": meta.blob_sha,
        }
        return found, source
