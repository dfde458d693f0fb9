"""Seed the dataset repo from the catalogue and post the catalogue's tasks on the board.

The dataset repo is created like any other (``ensure_repo``: ``main`` protected from the start), made a
dataset branch (trusted paths: ``tasks/`` is operator-only), and its initial tree is committed
server-side by the gate through the Forge protocol while ``main`` still holds only the forge's
initial commit (``gateway/forge/seed.py``). No push ever lands on the protected branch and there is
no moment in which it is unprotected; it works the same on the embedded forge and on Gitea.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gateway.errors import BoardError
from gateway.forge.defaults import DefaultRepo
from gateway.forge.gate.policy import ReviewPolicy
from gateway.forge.protocol import Forge
from gateway.forge.seed import seed_branch
from gateway.principals import Principal
from gateway.redis_facade import StrRedis
from gateway.services import FORGE
from gateway.tasks.models import SeedBody, TaskSpec
from gateway.tasks.service import BoardService
from gateway.tasks.sync import TASK_FILE_RE, remember, spec_of


def catalogue_specs(repo: str, only: list[str] | None = None) -> list[TaskSpec]:
    """Board entries for the catalogue's tasks (read without importing torch)."""
    from gateway.tasks.catalogue import catalogue

    return [spec_of(info, repo) for info in catalogue() if only is None or info.name in only]


def dataset_tree() -> Mapping[str, bytes]:
    from gateway.tasks.catalogue import dataset_files

    return dataset_files()


async def seed_repo(
    forge: Forge, redis: StrRedis, repo: str, files: Mapping[str, bytes], message: str
) -> tuple[str, str | None]:
    """Ensure ``org/name`` as a dataset repo and seed its ``main`` with ``files`` if new: (clone URL,
    seed commit or None). A main protected without the dataset rules gets them (the tasks there are
    the workers' definitions: only operators may change them); its other rules stay."""
    org, _, name = repo.partition("/")
    if not org or not name:
        raise BoardError(f"repo must be org/name, not {repo!r}", 422)
    info = await forge.ensure_repo(org, name)
    main = info.default_branch
    policy = await forge.get_protection(org, name, main) or ReviewPolicy(protected_branches=[main])
    if not policy.dataset:
        await forge.protect_branch(org, name, main, policy.model_copy(update={"dataset": True}))
    commit = await seed_branch(forge, redis, org, name, main, files, message)
    await DefaultRepo(redis).claim(info.full_name)
    names = [m.group("name") for path in files if (m := TASK_FILE_RE.match(path))]
    await remember(redis, info.full_name, names)  # the seeded tasks are the board's baseline
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
        forge, svc.ctx.redis, repo, tree(), "Seed the dataset repo: task catalogue and layout\n"
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
