"""Seed the dataset repo from the catalogue and post the catalogue's tasks on the board.

The dataset repo is created like any other (``ensure_repo``: ``main`` protected from the start) and
its initial tree is committed server-side, straight into the bare repo, by the gate's identity, while
``main`` still holds only the forge's initial commit (``gateway.git.aio.BareRepo.seed_branch``). No push ever
lands on the protected branch and there is no moment in which it is unprotected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gateway.errors import BoardError
from gateway.forge.embedded import embedded_bare
from gateway.forge.protocol import Forge
from gateway.principals import Principal
from gateway.services import FORGE
from gateway.tasks.models import SeedBody, TaskSpec
from gateway.tasks.service import BoardService


def catalogue_specs(repo: str, only: list[str] | None = None) -> list[TaskSpec]:
    """Board entries for the catalogue's tasks (read without importing torch)."""
    from gateway.tasks.catalogue import catalogue

    specs = []
    for info in catalogue():
        if only is not None and info.name not in only:
            continue
        description = (
            f"{info.description}\n\nTask file: tasks/{info.name}/task.py (entry `{info.entry}`). Put your "
            f"kernel in kernels/{info.name}/<you>_<variant>.py on a branch <you>/..., verify it with "
            f'job_submit(task="{info.name}", ...), and open a PR.'
        )
        specs.append(
            TaskSpec(
                id=info.name, title=info.title, description=description, repo=repo, labels=[info.category]
            )
        )
    return specs


def dataset_tree() -> Mapping[str, bytes]:
    from gateway.tasks.catalogue import dataset_files

    return dataset_files()


async def seed_repo(
    forge: Forge, repo: str, files: Mapping[str, bytes], message: str, swarm: str
) -> tuple[str, str | None]:
    """Ensure ``org/name`` and seed its ``main`` with ``files`` if new: (clone URL, seed commit or None)."""
    org, _, name = repo.partition("/")
    if not org or not name:
        raise BoardError(f"repo must be org/name, not {repo!r}", 422)
    info = await forge.ensure_repo(org, name)
    bare = embedded_bare(forge, org, name)
    commit = await bare.seed_branch(info.default_branch, files, message, "gate", f"gate@bots.{swarm}")
    return info.clone_url, commit


async def seed_dataset(
    svc: BoardService,
    who: Principal,
    body: SeedBody,
    tree: Callable[[], Mapping[str, bytes]] = dataset_tree,
) -> dict[str, Any]:
    forge = svc.ctx.services.find(FORGE)
    if forge is None:
        raise BoardError("seeding the dataset repo needs the forge plugin", 503)
    repo = body.repo or svc.settings.dataset_repo
    clone_url, commit = await seed_repo(
        forge, repo, tree(), "Seed the dataset repo: task catalogue and layout\n", svc.ctx.settings.swarm
    )
    posted: list[str] = []
    existing: list[str] = []
    if body.post_tasks:
        for spec in catalogue_specs(repo, body.only):
            try:
                await svc.board.post(spec, who.name)
                posted.append(spec.id)
            except BoardError as exc:
                if exc.status != 409:
                    raise
                existing.append(spec.id)
        if posted:
            await svc.announce(
                f"{len(posted)} new tasks on the board for {repo}: {', '.join(posted)}. "
                "task_list to see them, task_claim to take one."
            )
    return {"repo": repo, "clone_url": clone_url, "seeded": commit, "posted": posted, "existing": existing}
