"""The board follows the dataset repo's protected main: a task merged there is posted, no restart.

Every sweep the board reads main's head (one ``resolve_ref``); when it moved, it lists
``tasks/*/task.py`` there (``read_tree``) and posts each task it has not seen on that repo before,
as the board bot, with the task's title, category and description from the file. What the repo held
when the board first looked (or what seeding put there) is the baseline and is never posted by this
(``kswarm tasks seed --no-post`` stays unposted); only tasks that appear later are. Only a trusted
dataset branch is followed (``definitions.trusts_tasks``): a task on an unprotected branch is not
an operator's.
"""

from __future__ import annotations

import logging
import re

from gateway.forge.protocol import Forge
from gateway.redis_facade import StrRedis
from gateway.tasks.catalogue import TaskInfo, task_info_from_source
from gateway.tasks.definitions import find_repo, trusts_tasks
from gateway.tasks.models import TaskSpec

log = logging.getLogger("kswarm.tasks.sync")
TASK_FILE_RE = re.compile(r"^tasks/(?P<name>[a-z0-9][a-z0-9_.-]{0,63})/task\.py$")


def known_key(repo: str) -> str:
    return f"ks:tasks:known:{repo}"  # set: task names seen on the repo's main


def head_key(repo: str) -> str:
    return f"ks:tasks:synced-head:{repo}"


def spec_of(info: TaskInfo, repo: str) -> TaskSpec:
    description = (
        f"{info.description}\n\nTask file: tasks/{info.name}/task.py (entry `{info.entry}`). Put your "
        f"kernel in kernels/{info.name}/<you>_<variant>.py on a branch <you>/..., verify it with "
        f'job_submit(task="{info.name}", ...), and open a PR.'
    )
    return TaskSpec(
        id=info.name, title=info.title, description=description, repo=repo, labels=[info.category]
    )


async def remember(redis: StrRedis, repo: str, names: list[str]) -> None:
    if names:
        await redis.sadd(known_key(repo), *names)


async def new_tasks_on_main(redis: StrRedis, forge: Forge, repo: str) -> list[TaskSpec]:
    """Specs of the tasks that appeared on ``repo``'s trusted main since the board last looked."""
    info = await find_repo(forge, repo)
    if info is None:
        return []
    policy = await forge.get_protection(info.org, info.name, info.default_branch)
    head = await forge.resolve_ref(info.org, info.name, info.default_branch)
    if head is None or await redis.get(head_key(repo)) == head:
        return []
    files = await forge.read_tree(info.org, info.name, head, prefix="tasks/", suffixes=("/task.py",))
    found = {m.group("name"): f for f in files if (m := TASK_FILE_RE.match(f.path))}
    trusted = {name: f for name, f in found.items() if trusts_tasks(policy, name)}
    first_look = not await redis.exists(known_key(repo))
    known = set(await redis.smembers(known_key(repo)))
    specs: list[TaskSpec] = []
    if not first_look:
        for name in sorted(set(trusted) - known):
            try:
                specs.append(spec_of(task_info_from_source(name, trusted[name].text()), repo))
            except ValueError as exc:
                log.warning("%s: %s", repo, exc)
    await remember(redis, repo, sorted(trusted))
    await redis.set(head_key(repo), head)
    return specs
