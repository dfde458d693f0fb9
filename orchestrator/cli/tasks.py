"""``kswarm tasks``: the task board from a terminal. Its verbs are on ``app``, the ``tasks`` group of
``main``; the gateway is found like every command's (``commands.connect``).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.table import Table

from gateway.tasks.catalogue import task_info_from_source
from gateway.tasks.models import TASK_ID_PATTERN
from orchestrator.cli.commands import HomeOpt, JsonOpt, command, connect
from orchestrator.cli.output import console, fail, print_json, safe

TaskState = Literal["open", "claimed", "done"]


def call(home: Path | None, method: str, path: str, **kwargs: Any) -> Any:
    with connect(home) as gateway:
        return gateway.request(method, path, **kwargs)


def _left(expires_at: float | None) -> str:
    return f"{max(0, int(expires_at - time.time()))} s" if expires_at else ""


def task_file_problem(directory: Path) -> str | None:
    """The harness's own check of an operator's task, as a worker will load it: its shapes, layouts and
    input domain (``DOMAIN``, required of a new task: the red-team and the gate's fresh inputs are
    judged by it). None when it passes, or when this machine has no harness (no torch): the workers
    then check it as they load it."""
    try:
        from orchestrator.verify.tasks import TaskError, load_task
    except ImportError:
        return None
    try:
        task = load_task(directory)
    except TaskError as exc:
        return f"{directory / 'task.py'}: {exc}"
    except Exception as exc:  # the operator's own file, raising as it loads
        return f"{directory / 'task.py'} does not load: {type(exc).__name__}: {exc}"
    if task.domain is None:
        return (
            f"{directory / 'task.py'} declares no DOMAIN: every input its kernel must handle "
            "(docs/tasks.md, 'Input domain')"
        )
    return None


app = typer.Typer(help="The task board: tasks, who holds them, seeding from the catalogue.")


@command(app, "list")
def list_tasks(
    state: Annotated[TaskState | None, typer.Option("--state", "-s", help="open, claimed or done.")] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Every task with its state, holder and lease."""
    tasks = call(home, "GET", "/api/tasks", params={"state": state} if state else None)
    if as_json:
        print_json(tasks, indent=1)
        return
    table = Table("task", "state", "holder", "lease left", "claims", "done by", "title")
    for t in tasks:
        table.add_row(
            safe(t["id"]), safe(t["state"]), safe(t["holder"]), _left(t["expires_at"]), str(t["claims"]),
            safe(t["done_by"]), safe(t["title"]),
        )  # fmt: skip
    console.print(table)


@command(app, "seed")
def seed(
    repo: Annotated[str | None, typer.Option("--repo", "-r", help="org/name of the dataset repo.")] = None,
    no_post: Annotated[bool, typer.Option("--no-post", help="Seed the repo only; post no tasks.")] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create the dataset repo from the catalogue template and post the catalogue's tasks."""
    answer = call(home, "POST", "/api/tasks/seed", json={"repo": repo, "post_tasks": not no_post})
    if as_json:
        print_json(answer, indent=1)
        return
    seeded = answer["seeded"] or "already seeded"
    console.print(f"{safe(answer['repo'])} ({safe(answer['clone_url'])}): {safe(seeded)}")
    console.print(f"posted {len(answer['posted'])} tasks, {len(answer['existing'])} already on the board")


@command(app, "add")
def add(
    directory: Annotated[
        Path, typer.Argument(help="The task's directory (holds task.py; its name is the task's).")
    ],
    repo: Annotated[str | None, typer.Option("--repo", "-r", help="org/name of the dataset repo.")] = None,
    reviewer: Annotated[
        list[str] | None,
        typer.Option("--reviewer", metavar="NAME", help="Who reviews the PR (repeatable)."),
    ] = None,
    message: Annotated[str, typer.Option("--message", "-m", help="Commit message and PR body.")] = "",
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Propose your own task (DIR/task.py) as a PR to the dataset repo's main: versioned and reviewed;
    once merged, the board posts it and the workers judge jobs by it (no restart)."""
    name = directory.resolve().name
    if not re.fullmatch(TASK_ID_PATTERN.strip("^$"), name):
        fail(f"bad task name {name!r} (the directory's name): a-z, 0-9, '_', '.', '-' (max 64)", 2)
    task_py = directory / "task.py"
    if not task_py.is_file():
        fail(f"{directory} has no task.py (docs/verification.md: the task format)", 2)
    text = task_py.read_text()
    try:
        info = task_info_from_source(name, text)
    except ValueError as exc:
        fail(str(exc), 2)
    problem = task_file_problem(directory)
    if problem is not None:
        fail(problem, 2)
    body = {"name": name, "task_py": text, "repo": repo, "reviewers": reviewer or [], "message": message}
    answer = call(home, "POST", "/api/tasks/definitions", json=body)
    if as_json:
        print_json(answer, indent=1)
        return
    verb = "an update of" if answer["update"] else "the new task"
    who = ", ".join(map(safe, answer["reviewers"])) or "a reviewer (none requested: name one with --reviewer)"
    console.print(
        f"proposed {verb} {safe(info.name)} ({safe(info.title)}) as PR #{answer['pr']} in "
        f"{safe(answer['repo'])} (branch {safe(answer['branch'])}); it lands on main once {who} "
        "approves, then the board and the workers have it"
    )


@command(app, "post")
def post(
    task_id: Annotated[str, typer.Argument(help="Task id (a-z, 0-9, _ . -).")],
    title: Annotated[str, typer.Argument(help="One line.")],
    description: Annotated[str, typer.Option("--description", "-d", help="What and how it is judged.")] = "",
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Post one task (operators; lead agents use the MCP tool task_post)."""
    task = call(home, "POST", "/api/tasks", json={"id": task_id, "title": title, "description": description})
    if as_json:
        print_json(task, indent=1)
        return
    console.print(f"posted {safe(task['id'])} to {safe(task['repo'])}")


@command(app, "lead")
def lead(
    name: Annotated[str, typer.Argument(help="Agent allowed to post tasks.")],
    remove: Annotated[bool, typer.Option("--remove", help="Take the right away.")] = False,
    home: HomeOpt = None,
) -> None:
    """Let an agent post tasks (or stop it with --remove)."""
    call(home, "DELETE" if remove else "PUT", f"/api/tasks/leads/{name}")  # 204: no object (no --json)
    console.print(f"{safe(name)} {'may no longer' if remove else 'may now'} post tasks")


@command(app, "release")
def release(
    task_id: Annotated[str, typer.Argument(help="Task id.")],
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Release whoever holds a task (operators)."""
    task = call(home, "POST", f"/api/tasks/{task_id}/release")
    if as_json:
        print_json(task, indent=1)
        return
    console.print(f"{safe(task['id'])} is {safe(task['state'])}")
