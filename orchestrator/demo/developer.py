"""The developer's rules of the demo policy: claim, branch, commit, push, PR, verify; forward job
results to the reviewer; fix on request; mark the task done when the gate merges."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from agents.models.scripted import Call, Scratch, Step, need_identity
from gateway.tasks import catalogue
from orchestrator.demo.steps import (
    CHANGES_RE,
    JOB_DM_RE,
    MERGED_RE,
    WITHDRAWN_RE,
    DemoPolicy,
    Flow,
    checkout_command,
    clone_dir,
    commit_push_command,
    flags_text,
    me,
    pushed_sha,
)


def has_solution(task: str) -> bool:
    return catalogue.solution_path(task).is_file()


def kernel_path(task: str, author: str) -> str:
    return f"kernels/{task}/{author}_triton.py"


def bash_ok(raw: str | None) -> bool:
    return raw is not None and "[exit code 0;" in raw


# A task's attempts: the first, the fix after a review asked for changes, and the fix after a red
# team's regression case withdrew the merged kernel (a new PR: the first one is merged).
Attempt = Literal["first", "fix", "heal"]


def kernel_source(policy: DemoPolicy, task: str, attempt: Attempt) -> Path:
    """The file a scripted developer writes: the catalogue's known-wrong kernel first (faulty tasks),
    then its unstable one while a red team is there to break it, else the honest solution."""
    if attempt == "first" and task in policy.faulty and catalogue.wrong_solution_path(task).is_file():
        return catalogue.wrong_solution_path(task)
    if attempt != "heal" and policy.unstable(task):
        return catalogue.unstable_solution_path(task)
    return catalogue.solution_path(task)


def push_and_verify(policy: DemoPolicy, flow: Flow, task_of: Any, attempt: Attempt, pre: str = "") -> None:
    """Branch from main, write the kernel, commit and push as ourselves, open the PR (not for a fix:
    that PR is open) and submit the verification job for the pushed sha. ``task_of(s)`` names the
    task or None."""
    first = attempt != "fix"

    def ready(s: Scratch) -> tuple[str, str, str] | None:
        task = task_of(s)
        return (task, me(s), f"{me(s)}/{task}") if task and me(s) else None

    def checkout(s: Scratch) -> Call | None:
        got = ready(s)
        return Call("bash", {"command": checkout_command(policy.repo, got[2])}) if got else None

    def write(s: Scratch) -> Call | None:
        got = ready(s)
        if not got or not bash_ok(flow.result(s, pre + "checkout")):
            return None
        task, author, _ = got
        source = kernel_source(policy, task, attempt).read_text()
        path = f"{clone_dir(policy.repo)}/{kernel_path(task, author)}"
        return Call("write_file", {"path": path, "content": source})

    def push(s: Scratch) -> Call | None:
        got = ready(s)
        if not got or not flow.made(s, pre + "write"):
            return None
        task, author, branch = got
        what = {
            "first": f"{task}: Triton kernel by {author}",
            "fix": f"{task}: fix the kernel after review",
            "heal": f"{task}: a kernel that survives the regression case",
        }[attempt]
        path = kernel_path(task, author)
        command = commit_push_command(policy.repo, s.identity() or {}, path, what, branch)
        return Call("bash", {"command": command})

    def sha(s: Scratch) -> str | None:
        return pushed_sha(flow.result(s, pre + "push"))

    def open_pr(s: Scratch) -> Call | None:
        got = ready(s)
        if not first or not got or not sha(s):
            return None
        task, author, branch = got
        info = catalogue.task_info(task)
        body = (
            f"A Triton kernel for `{task}` ({info.title.rstrip('.')}), in `{kernel_path(task, author)}`.\n\n"
            f"Verification: job_submit on the `{policy.pool}` pool at the head commit; results follow here."
        )
        title = f"{task}: Triton kernel by {author}"
        if attempt == "heal":
            title = f"{task}: a fixed kernel by {author} after a regression case withdrew the last one"
        return Call(
            "pr_open",
            {
                "head": branch,
                "title": title,
                "body": body,
                "reviewers": policy.reviewer_for(task, author),
                "repo": policy.repo,
            },
        )

    def submit(s: Scratch) -> Call | None:
        got, head = ready(s), sha(s)
        if not got or not head:
            return None
        task, author, _ = got
        kernel = kernel_path(task, author)
        args = {"task": task, "kernel": kernel, "ref": head, "repo": policy.repo, "pool": policy.pool}
        return Call("job_submit", args)

    def give_up(s: Scratch) -> Call | None:
        got = ready(s)
        if attempt != "first" or not got:
            return None
        checkout_failed = flow.made(s, pre + "checkout") and not bash_ok(flow.result(s, pre + "checkout"))
        push_failed = flow.made(s, pre + "push") and not sha(s)
        return Call("task_release", {"id": got[0]}) if checkout_failed or push_failed else None

    for key, make in [
        ("checkout", checkout),
        ("write", write),
        ("push", push),
        ("pr", open_pr),
        ("job", submit),
        ("release", give_up),
    ]:
        flow.add(pre + key, make)


def work_on_next_task(policy: DemoPolicy, flow: Flow, pre: str = "") -> None:
    """``task_list``, claim the first open task we can (a lost race moves on), and work on it."""
    flow.add(pre + "list", lambda s: Call("task_list", {"state": "open"}))

    def candidates(s: Scratch) -> list[str]:
        listed = flow.data(s, pre + "list")
        ids = [t.get("id") for t in listed if isinstance(t, dict)] if isinstance(listed, list) else []
        return [i for i in ids if isinstance(i, str) and has_solution(i)]

    def claimed(s: Scratch) -> str | None:
        for i in range(policy.max_claims):
            got = flow.data(s, f"{pre}claim{i}")
            if isinstance(got, dict) and got.get("holder") == me(s) and got.get("state") == "claimed":
                return str(got["id"])
        return None

    def claim(i: int) -> Step:
        def step(s: Scratch) -> Call | None:
            if claimed(s) is not None:
                return None
            todo = candidates(s)
            return Call("task_claim", {"id": todo[i]}) if i < len(todo) else None

        return step

    for i in range(policy.max_claims):
        flow.add(f"{pre}claim{i}", claim(i))
    push_and_verify(policy, flow, claimed, "first", pre=pre)

    def announce(s: Scratch) -> Call | None:
        pr, job, task = flow.data(s, pre + "pr"), flow.data(s, pre + "job"), claimed(s)
        if not (isinstance(pr, dict) and isinstance(job, dict) and task):
            return None
        text = f"Took `{task}`: PR #{pr.get('number')} is open; job {job.get('id')} queued on {policy.pool}."
        return Call("chat_post", {"channel": "general", "text": text})

    flow.add(pre + "announce", announce)


def dev_start(policy: DemoPolicy, event: dict[str, Any]) -> list[Step]:
    flow = Flow([need_identity])
    work_on_next_task(policy, flow)
    return flow.steps


def find_pr(prs: Any, head: str) -> dict[str, Any] | None:
    for pr in prs if isinstance(prs, list) else []:
        if isinstance(pr, dict) and pr.get("head") == head:
            return pr
    return None


def dev_job_result(policy: DemoPolicy, event: dict[str, Any]) -> list[Step]:
    """A job of ours finished: put the result on the PR, ask its reviewer to look, take the next task."""
    found = JOB_DM_RE.match(event.get("text", ""))
    assert found is not None
    job_id, task = found.group(1), found.group(2)
    flow = Flow([need_identity])
    flow.add("job", lambda s: Call("job_status", {"id": job_id}))
    flow.add("prs", lambda s: Call("pr_list", {"repo": policy.repo, "state": "open", "mine": True}))

    def pr_number(s: Scratch) -> int | None:
        pr = find_pr(flow.data(s, "prs"), f"{me(s)}/{task}")
        return int(pr["number"]) if pr else None

    def current(s: Scratch) -> tuple[int, dict[str, Any], dict[str, Any]] | None:
        """(PR number, job, PR view) when the job is for the PR's head; a stale job is not forwarded."""
        job, view, number = flow.data(s, "job"), flow.data(s, "view"), pr_number(s)
        if not (isinstance(job, dict) and isinstance(view, dict) and number):
            return None
        return (number, job, view) if job.get("sha") == view.get("head_sha") else None

    def view(s: Scratch) -> Call | None:
        number = pr_number(s)
        return Call("pr_view", {"number": number, "repo": policy.repo, "diff": False}) if number else None

    def comment(s: Scratch) -> Call | None:
        got = current(s)
        if not got:
            return None
        number, job, _ = got
        body = (
            f"Verification job {job_id} on `{policy.pool}` at {str(job.get('sha'))[:10]}: "
            f"**{job.get('state')}** — {flags_text(job)}."
        )
        return Call("pr_comment", {"number": number, "body": body, "repo": policy.repo})

    def ping(s: Scratch) -> Call | None:
        got = current(s)
        if not got:
            return None
        number, job, pr = got
        reviewers = [r for r in pr.get("requested_reviewers") or [] if r != me(s)]
        if not reviewers:
            return None
        mentions = " ".join(f"@{r}" for r in reviewers)
        text = (
            f"{mentions} PR #{number} (`{task}`, head {str(job.get('sha'))[:10]}): job {job_id} "
            f"{job.get('state')} — {flags_text(job)}. Please review."
        )
        return Call("chat_post", {"channel": "reviews", "text": text})

    flow.add("view", view)
    flow.add("comment", comment)
    flow.add("ping", ping)
    work_on_next_task(policy, flow, pre="next-")
    return flow.steps


def dev_fix(policy: DemoPolicy, event: dict[str, Any]) -> list[Step]:
    """Changes requested on our PR: a fresh commit with the corrected kernel, force-pushed, a new job."""
    found = CHANGES_RE.search(event.get("text", ""))
    assert found is not None
    number = int(found.group(1))
    flow = Flow([need_identity])
    flow.add("view", lambda s: Call("pr_view", {"number": number, "repo": policy.repo, "diff": False}))

    def task_of(s: Scratch) -> str | None:
        pr = flow.data(s, "view")
        if not isinstance(pr, dict) or pr.get("state") != "open" or pr.get("author") != me(s):
            return None
        head = str(pr.get("head", ""))
        return head.split("/", 1)[1] if head.startswith(f"{me(s)}/") else None

    push_and_verify(policy, flow, task_of, "fix")

    def comment(s: Scratch) -> Call | None:
        job, task = flow.data(s, "job"), task_of(s)
        if not isinstance(job, dict) or not task:
            return None
        doc = kernel_source(policy, task, "fix").read_text().split('"""')[1].strip().splitlines()[0]
        body = (
            f"Thanks — fixed in {str(job.get('sha'))[:10]}: {doc} "
            f"Verification job {job.get('id')} is queued on `{policy.pool}`."
        )
        return Call("pr_comment", {"number": number, "body": body, "repo": policy.repo})

    flow.add("comment", comment)
    return flow.steps


def dev_merged(policy: DemoPolicy, event: dict[str, Any]) -> list[Step]:
    """The gate merged our PR: mark its task done on the board."""
    found = MERGED_RE.search(event.get("text", ""))
    assert found is not None
    repo, number = found.group(1), int(found.group(2))
    flow = Flow([need_identity])
    flow.add("view", lambda s: Call("pr_view", {"number": number, "repo": repo, "diff": False}))

    def done(s: Scratch) -> Call | None:
        pr = flow.data(s, "view")
        if not isinstance(pr, dict) or pr.get("state") != "merged" or pr.get("author") != me(s):
            return None
        task = str(pr.get("head", "")).split("/", 1)[-1]
        result = f"PR #{number} merged into {pr.get('base')} as {str(pr.get('merge_sha'))[:10]}"
        return Call("task_done", {"id": task, "result": result})

    def ask_red_team(s: Scratch) -> Call | None:
        """Ask the red team to attack what just merged (a task done before keeps its state)."""
        pr = flow.data(s, "view")
        if not flow.made(s, "done") or not isinstance(pr, dict) or not policy.red_team:
            return None
        task = str(pr.get("head", "")).split("/", 1)[-1]
        if task not in policy.attack:
            return None
        red = " ".join(f"@{r}" for r in policy.red_team)
        text = (
            f"{red} merged {kernel_path(task, me(s))} at {pr.get('head_sha')} (PR #{number}): "
            "please try to break it with inputs inside the task's domain."
        )
        return Call("chat_post", {"channel": "general", "text": text})

    flow.add("done", done)
    flow.add("red-team", ask_red_team)
    return flow.steps


def dev_withdrawn(policy: DemoPolicy, event: dict[str, Any]) -> list[Step]:
    """A regression case withdrew our merged kernel: the honest kernel on a fresh branch, a new PR."""
    found = WITHDRAWN_RE.search(event.get("text", ""))
    assert found is not None
    task = found.group(2)
    flow = Flow([need_identity])
    push_and_verify(policy, flow, lambda s: task if me(s) else None, "heal")

    def announce(s: Scratch) -> Call | None:
        pr, job = flow.data(s, "pr"), flow.data(s, "job")
        if not (isinstance(pr, dict) and isinstance(job, dict)):
            return None
        text = (
            f"My `{task}` kernel was withdrawn by a regression case: PR #{pr.get('number')} has a fix; "
            f"job {job.get('id')} queued on {policy.pool}."
        )
        return Call("chat_post", {"channel": "general", "text": text})

    flow.add("announce", announce)
    return flow.steps
