"""Seeding the dataset repo from the catalogue: main gets the template in one gate-authored commit while
it stays protected, the board gets every catalogue task, and a second seed changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from boardkit import BoardGateway
from forgekit import Git
from typer.testing import CliRunner

from gateway.tasks.catalogue import task_names
from orchestrator.cli.main import app


def test_taskboard_seed_dataset_repo_and_board(board_gw: BoardGateway, short_tmp: Path) -> None:
    gw = board_gw
    with gw.client(gw.operator_token) as op:
        assert gw.client(gw.tokens["a8"]).post("/api/tasks/seed", json={}).status_code == 403
        first = op.post("/api/tasks/seed", json={})
        assert first.status_code == 200, first.text
        seeded = first.json()
        assert seeded["repo"] == "kswarm/dataset" and seeded["seeded"]
        assert sorted(seeded["posted"]) == task_names() and len(seeded["posted"]) >= 24
        again = op.post("/api/tasks/seed", json={}).json()
        assert again["seeded"] is None and sorted(again["existing"]) == task_names() and not again["posted"]
        board = {t["id"]: t for t in op.get("/api/tasks").json()}
    entry = board["masked_cross_entropy"]
    assert (entry["repo"], entry["labels"], entry["posted_by"]) == ("kswarm/dataset", ["loss"], "operator")
    assert "sum(mask) == 0" in entry["description"]

    agent = Git(short_tmp / "h-a8", gw.tokens["a8"], "a8", "a8@agents.test")
    work = agent.clone(f"{gw.url}/git/kswarm/dataset.git", short_tmp / "kernels")
    for name in task_names():
        assert (work / "tasks" / name / "task.py").is_file()
        assert (work / "kernels" / name / "README.md").is_file()
    assert "masked_cross_entropy" in (work / "README.md").read_text()
    log = agent.run("log", "--format=%H %ae %s", "main", cwd=work).stdout.splitlines()
    assert len(log) == 2 and log[0].split()[0] == seeded["seeded"]
    assert all(line.split()[1] == "gate@bots.test" for line in log)

    # main is still protected: an agent's (or anyone's) push to it is refused by the forge.
    agent.commit(work, "kernels/add/a8_x.py", "# nope\n", "straight to main")
    pushed = agent.push(work, "HEAD:main")
    assert pushed.returncode != 0 and "protected" in pushed.stderr


def test_taskboard_cli(board_gw: BoardGateway, tmp_path: Path) -> None:
    env = {"KSWARM_URL": board_gw.url, "KSWARM_TOKEN": board_gw.operator_token, "COLUMNS": "200"}
    runner = CliRunner()
    home = ["--home", str(tmp_path)]
    posted = runner.invoke(app, ["tasks", "post", "cli-task", "A task from the CLI", *home], env=env)
    assert posted.exit_code == 0, posted.output
    with board_gw.client(board_gw.tokens["a8"]) as a8:
        assert a8.post("/api/tasks/cli-task/claim").status_code == 200
    listed = runner.invoke(app, ["tasks", "list", "--state", "claimed", *home], env=env)
    assert listed.exit_code == 0 and "cli-task" in listed.output and "a8" in listed.output
    as_json = runner.invoke(app, ["tasks", "list", "--json", *home], env=env)
    task = next(t for t in json.loads(as_json.output) if t["id"] == "cli-task")
    assert task["holder"] == "a8" and task["posted_by"] == "operator"
    released = runner.invoke(app, ["tasks", "release", "cli-task", *home], env=env)
    assert released.exit_code == 0 and "open" in released.output
    assert runner.invoke(app, ["tasks", "lead", "a8", *home], env=env).exit_code == 0
    again = runner.invoke(app, ["tasks", "post", "cli-task", "dup", *home], env=env)
    assert again.exit_code == 1 and "409" in again.output
