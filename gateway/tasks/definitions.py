"""Task definitions from the dataset repo's protected main: what workers load, and how operators add.

A job's task is ``tasks/<task>/task.py`` on its repo's default branch (main) at main's current head —
the commit the gate will merge onto, never the PR's head — when that branch is a **trusted dataset
branch**: protected, ``dataset`` rules on, and ``tasks/<task>/task.py`` one of its trusted
(operator-only) paths, so no agent's PR can change it (the gate blocks such a PR). Otherwise (another
kind of repo, or a task main does not define) it is the gateway's catalogue file. Workers ask
``GET /api/tasks/{task}/definition?repo=``, cache the file by its blob sha and record that sha in the
job's result (``orchestrator/worker/tasks.py``). From a trusted main the definition also lists the
task's regression cases (``tasks/<task>/regressions/<id>.json``, confirmed counterexamples, issue 27):
the worker stores them beside task.py and the harness runs each as an extra trial.

``add_task`` is ``kswarm tasks add DIR``: the operator's task.py committed by the operator on a new
branch ``<operator>/task-<name>-<id>`` and proposed as a PR to main, so the definition is versioned
and reviewed like everything else there (an operator's PR may change trusted paths); once the gate
merges it, the board posts it (``sync.py``) and workers load it — no restart.
"""

from __future__ import annotations

import fnmatch
import hashlib
import secrets
from string import Template

from pydantic import ValidationError

from gateway.context import GatewayContext
from gateway.errors import BoardError, ForgeError
from gateway.forge.gate.policy import ReviewPolicy
from gateway.forge.gate.vouched import OperatorHeads
from gateway.forge.models import RepoInfo
from gateway.forge.notices import notify_review_request
from gateway.forge.protocol import Forge
from gateway.principals import Principal
from gateway.services import FORGE
from gateway.tasks.catalogue import TASKS_DIR, TEMPLATE_DIR, task_info_from_source
from gateway.tasks.models import AddTaskBody, RegressionFile, TaskDefinition
from kswarm_contracts.counterexample import COUNTEREXAMPLE_ID_RE, REGRESSIONS_DIR, RegressionCase

REGRESSION_MAX_BYTES = 64 * 1024  # a case is one input's description: a larger file is not one
REGRESSIONS_MAX = 500  # cases read per task


def task_path(task: str) -> str:
    return f"tasks/{task}/task.py"


def blob_sha(content: bytes) -> str:
    """Git's blob id of ``content`` (what ``git hash-object`` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def regressions_prefix(task: str) -> str:
    return f"tasks/{task}/{REGRESSIONS_DIR}/"


def trusts_tasks(policy: ReviewPolicy | None, task: str) -> bool:
    """Whether a branch under ``policy`` is one whose ``tasks/<task>/task.py`` only operators change."""
    if policy is None or not policy.dataset:
        return False
    return any(fnmatch.fnmatchcase(task_path(task), p) for p in policy.trusted_paths)


def split_repo(repo: str) -> tuple[str, str]:
    org, _, name = repo.partition("/")
    if not org or not name or "/" in name:
        raise BoardError(f"repo must be org/name, not {repo!r}", 422)
    return org, name


async def find_repo(forge: Forge, repo: str) -> RepoInfo | None:
    org, name = split_repo(repo)
    return next((r for r in await forge.list_repos(name) if r.full_name == f"{org}/{name}"), None)


async def trusted_main(forge: Forge, repo: str, task: str) -> tuple[RepoInfo, str] | None:
    """(repo, head of its default branch) when that branch is trusted for ``task``'s definition."""
    info = await find_repo(forge, repo)
    if info is None:
        return None
    policy = await forge.get_protection(info.org, info.name, info.default_branch)
    if not trusts_tasks(policy, task):
        return None
    head = await forge.resolve_ref(info.org, info.name, info.default_branch)
    return (info, head) if head else None


def regression_file(task: str, path: str, blob: str, size: int, text: str) -> RegressionFile | None:
    """The listing of one file under ``tasks/<task>/regressions/``; None when it is not a case's name."""
    name = path.removeprefix(regressions_prefix(task))
    if "/" in name or not name.endswith(".json"):
        return None
    case_id = name.removesuffix(".json")
    found = RegressionFile(id=case_id, path=path, blob_sha=blob, size=size, content=text)
    if not COUNTEREXAMPLE_ID_RE.match(case_id):
        found.error = f"{name}: not a counterexample id (cx + 12-24 hex)"
    elif size > REGRESSION_MAX_BYTES:
        found.error = f"{name}: over {REGRESSION_MAX_BYTES} bytes"
    else:
        try:
            case = RegressionCase.model_validate_json(text)
        except ValidationError as exc:
            found.error = f"{name}: not a regression case: {exc.errors()[0].get('msg', exc)}"[:300]
        else:
            if case.id != case_id or case.task != task:
                found.error = f"{name}: its id/task ({case.id}, {case.task}) are not the file's"
    return found


async def task_regressions(
    forge: Forge, info: RepoInfo, head: str, task: str, with_content: bool = True
) -> list[RegressionFile]:
    """Every ``tasks/<task>/regressions/<id>.json`` at ``head``, parsed (an unusable one says why). A
    case counts only where the branch keeps its path operator-only (else an agent's PR could add one)."""
    policy = await forge.get_protection(info.org, info.name, info.default_branch)
    patterns = policy.trusted_paths if policy is not None and policy.dataset else []
    files = await forge.read_tree(
        info.org, info.name, head, prefix=regressions_prefix(task), suffixes=(".json",),
        max_bytes=REGRESSION_MAX_BYTES, max_files=REGRESSIONS_MAX,
    )  # fmt: skip
    out: list[RegressionFile] = []
    for f in sorted(files, key=lambda f: f.path):
        found = regression_file(task, f.path, f.sha, f.size, f.text())
        if found is not None and found.error is None:
            if not any(fnmatch.fnmatchcase(f.path, p) for p in patterns):
                found.error = f"{f.path} is not an operator-only path of {info.default_branch}"
        if found is not None:
            if not with_content:
                found.content = None
            out.append(found)
    return out


async def task_definition(
    forge: Forge | None, repo: str | None, task: str, with_content: bool = True
) -> TaskDefinition:
    """A job's task definition: the trusted main's file, else the catalogue's; 404 when neither."""
    if forge is not None and repo:
        trusted = await trusted_main(forge, repo, task)
        if trusted is not None:
            info, head = trusted
            found = await forge.read_file(info.org, info.name, head, task_path(task))
            if found is not None:
                return TaskDefinition(
                    task=task, source="repo", repo=info.full_name, branch=info.default_branch, commit=head,
                    path=found.path, blob_sha=found.sha, size=found.size,
                    content=found.text() if with_content else None,
                    regressions=await task_regressions(forge, info, head, task, with_content),
                )  # fmt: skip
    local = TASKS_DIR / task / "task.py"
    if local.is_file():
        data = local.read_bytes()
        return TaskDefinition(
            task=task, source="catalogue", path=task_path(task), blob_sha=blob_sha(data), size=len(data),
            content=data.decode() if with_content else None,
        )  # fmt: skip
    where = f"{repo}'s protected main" if repo else "any trusted dataset repo"
    raise BoardError(f"no task {task!r}: not on {where} nor in the catalogue", 404)


def kernel_readme(name: str, entry: str, title: str, description: str) -> bytes:
    template = Template((TEMPLATE_DIR / "kernels" / "TASK_README.md").read_text())
    text = template.safe_substitute(task=name, entry=entry, title=title.rstrip("."), description=description)
    return text.encode()


async def add_task(
    ctx: GatewayContext, who: Principal, body: AddTaskBody, default_repo: str
) -> dict[str, object]:
    """Propose ``body``'s task definition as a PR to the dataset repo's main (``kswarm tasks add``)."""
    forge = ctx.services.find(FORGE)
    if forge is None:
        raise BoardError("adding a task needs the forge plugin", 503)
    repo = body.repo or default_repo
    try:
        info = task_info_from_source(body.name, body.task_py)
    except ValueError as exc:
        raise BoardError(str(exc), 422) from None
    trusted = await trusted_main(forge, repo, body.name)
    if trusted is None:
        raise BoardError(
            f"{repo}'s main is not a trusted dataset branch (protected with dataset rules that keep "
            "tasks/ operator-only), so a task there would not be trusted; seed it with `kswarm tasks seed` "
            "or protect it as a dataset repo",
            409,
        )
    repo_info, head = trusted
    org, name, main = repo_info.org, repo_info.name, repo_info.default_branch
    current = await forge.read_file(org, name, head, task_path(body.name))
    files: dict[str, bytes | None] = {task_path(body.name): body.task_py.encode()}
    if current is not None and current.content == files[task_path(body.name)]:
        raise BoardError(f"{task_path(body.name)} on {repo}'s {main} is already this file", 409)
    readme = f"kernels/{body.name}/README.md"
    if await forge.read_file(org, name, head, readme) is None:
        files[readme] = kernel_readme(body.name, info.entry, info.title, info.description)
    branch = f"{who.name}/task-{body.name}-{secrets.token_hex(3)}"
    verb = "Update" if current is not None else "Add"
    title = f"{verb} task {body.name}: {info.title}"[:200]
    message = body.message.strip() or f"{title}\n\n{info.description}".strip()
    try:
        commit = await forge.commit_files(
            who.name, org, name, main, files, message, expected_head=head, new_branch=branch
        )
        # Before the PR exists: the gate lets this head (and no later one) change trusted paths.
        await OperatorHeads(ctx.redis).record(repo_info.full_name, commit, branch, main)
        pr = await forge.open_pr(who.name, org, name, branch, main, title, message, body.reviewers)
    except ForgeError as exc:
        raise BoardError(f"cannot propose the task: {exc.message}", exc.status) from None
    await notify_review_request(ctx, who, pr, pr.requested_reviewers)
    return {
        "repo": repo_info.full_name,
        "task": body.name,
        "update": current is not None,
        "branch": branch,
        "commit": commit,
        "pr": pr.number,
        "title": pr.title,
        "reviewers": pr.requested_reviewers,
    }
