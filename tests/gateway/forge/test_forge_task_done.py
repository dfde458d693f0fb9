"""A task is done when its kernel is in: ``task_done`` needs a merged PR of the claimant that changes
``kernels/<task>/`` in the task's repo (issue "one agent cannot hurt the others": before, any
claimant could declare any task done with nothing merged). An operator may always mark one done."""

from __future__ import annotations

from forgekit import Swarm


def post_and_claim(swarm: Swarm, task_id: str, who: str) -> None:
    with swarm.gw.op() as op:
        reply = op.post("/api/tasks", json={"id": task_id, "title": f"do {task_id}", "repo": swarm.full})
        assert reply.status_code == 201, reply.text
    with swarm.gw.client(swarm.tokens[who]) as agent:
        reply = agent.post(f"/api/tasks/{task_id}/claim")
        assert reply.status_code == 200, reply.text


def done(swarm: Swarm, task_id: str, who: str) -> tuple[int, str]:
    with swarm.gw.client(swarm.tokens[who]) as agent:
        reply = agent.post(f"/api/tasks/{task_id}/done", json={"result": "PR merged, trust me"})
    return reply.status_code, reply.text


def test_task_done_needs_the_claimants_merged_pr_on_the_tasks_kernel(swarm: Swarm) -> None:
    task = f"td-{swarm.repo[-20:]}"
    post_and_claim(swarm, task, "alice")
    # nothing merged: the claimant's word is not enough
    code, text = done(swarm, task, "alice")
    assert code == 409 and "no merged PR" in text, text
    # a merged PR of alice's that changes another task's folder does not count either
    _, _, other = swarm.push_branch("alice", "alice/other", "kernels/elsewhere/alice_triton.py", "k\n")
    number = swarm.open_pr("alice", "alice/other", reviewers=("bob",))
    assert swarm.review("bob", number, "APPROVED").status_code == 200
    swarm.verify(other, "kernels/elsewhere/alice_triton.py", "pass")
    swarm.wait_merged(number)
    assert done(swarm, task, "alice")[0] == 409
    # the task's own kernel, merged: done
    kernel = f"kernels/{task}/alice_triton.py"
    _, _, sha = swarm.push_branch("alice", "alice/mine", kernel, "k\n")
    number = swarm.open_pr("alice", "alice/mine", reviewers=("bob",))
    assert swarm.review("bob", number, "APPROVED").status_code == 200
    swarm.verify(sha, kernel, "pass", task=task)
    swarm.wait_merged(number)
    code, text = done(swarm, task, "alice")
    assert code == 200, text


def test_an_operator_may_mark_a_task_done_without_a_pr(swarm: Swarm) -> None:
    task = f"to-{swarm.repo[-20:]}"
    post_and_claim(swarm, task, "carol")
    with swarm.gw.op() as op:
        reply = op.post(f"/api/tasks/{task}/done", json={"result": "superseded"})
    assert reply.status_code == 200, reply.text
    assert reply.json()["state"] == "done"
