"""The demo's rules for the scripted model: a lead, developers and reviewers -- a demo policy, not
intelligence.

It plugs into ``agents.models.scripted.ScriptedModel`` through its rule table (``ScriptedModel(
demo_rules(policy, role))``); the loop is unchanged. Developers do not write kernels: they copy the
catalogue's honest reference solutions (``gateway/tasks/catalogue/solutions``), and for the tasks in
``faulty`` their first attempt is the catalogue's known-wrong kernel (``solutions/wrong``), so that the
demo shows a job flagging it, a reviewer requesting changes and only the fix being merged.

Who wakes whom (every hop goes through the platform):

- operator DM "Kick-off ..." -> lead: ``task_post`` each task, then @developers @reviewers in #general;
- that mention -> developer: ``task_list``, ``task_claim`` (a lost race moves on to the next task),
  branch ``<me>/<task>``, commit, push, ``pr_open`` (a reviewer gets a notice), ``job_submit``;
- the worker's job DM -> developer: ``job_status``, comment on the PR, @reviewer in #reviews, next task;
- that mention -> reviewer: ``pr_view`` + ``job_status``; approve only when every kernel the PR
  changes passed a job at its head (the gateway's per-kernel evidence in ``pr_view``), else
  REQUEST_CHANGES citing the failing job's flags and @author, or a comment while one is pending;
- "changes requested" -> developer: a fresh commit with the fix, force-pushed, and a new job;
- the gate's "merged" notice -> developer: ``task_done``.
"""

from __future__ import annotations

from typing import Any

from agents.models.scripted import Call, Rule, Scratch, Step, default_rules, need_identity
from gateway.tasks import catalogue
from orchestrator.demo.developer import dev_fix, dev_job_result, dev_merged, dev_start, dev_withdrawn
from orchestrator.demo.steps import (
    ATTACK_RE,
    CHANGES_RE,
    JOB_DM_RE,
    KICKOFF_RE,
    MERGED_RE,
    REGRESSION_FILE_RE,
    REVIEW_PING_RE,
    REVIEW_REQUEST_RE,
    WITHDRAWN_RE,
    DemoPolicy,
    Flow,
    changed_paths,
    flags_text,
    names_after,
)

__all__ = ["DemoPolicy", "demo_rules"]


# -- reviewer -----------------------------------------------------------------------------------


def rev_look(policy: DemoPolicy, event: dict[str, Any]) -> list[Step]:
    """A review request: read the PR now; the verdict waits for the job's result -- except for a PR
    that only adds a red team's regression case, which no job verifies: the gate has already checked
    that the file is a confirmed counterexample's (else it names it in blocked_paths)."""
    found = REVIEW_REQUEST_RE.search(event.get("text", ""))
    assert found is not None
    repo, number = found.group(1), int(found.group(2))
    flow = Flow()
    flow.add("view", lambda s: Call("pr_view", {"number": number, "repo": repo, "diff": True}))

    def approve_regression(s: Scratch) -> Call | None:
        pr = flow.data(s, "view")
        if not isinstance(pr, dict) or pr.get("state") != "open":
            return None
        paths = changed_paths(str(pr.get("diff") or ""))
        gate = pr.get("gate") or {}
        if not paths or not all(REGRESSION_FILE_RE.match(p) for p in paths) or gate.get("blocked_paths"):
            return None
        head = str(pr.get("head_sha"))
        body = (
            f"A confirmed counterexample's regression case ({', '.join(paths)}): the gate checked it "
            f"against the confirming job. Approving {head[:10]}."
        )
        args = {"number": number, "event": "APPROVED", "body": body, "head_sha": head, "repo": repo}
        return Call("pr_review", args)

    flow.add("approve", approve_regression)
    return flow.steps


# -- red team -----------------------------------------------------------------------------------


def red_attack(policy: DemoPolicy, event: dict[str, Any]) -> list[Step]:
    """A merged kernel to attack: submit an input inside the task's domain that a kernel without the
    max subtraction gets wrong (large logits, a special value the task's domain declares). The scripted
    red team knows one attack; the harness decides whether it breaks this kernel."""
    found = ATTACK_RE.search(event.get("text", ""))
    assert found is not None
    kernel, task, sha = found.group(1), found.group(2), found.group(3)
    if task not in policy.attack:
        return []
    flow = Flow()
    attack = {
        "task": task,
        "repo": policy.repo,
        "kernel": kernel,
        "sha": sha,
        "input": {"case": {"rows": 4, "cols": 200}, "dtype": "float32", "seed": 7, "special": ["large"]},
        "note": "Large logits: exp overflows unless the row's max is subtracted first.",
    }
    flow.add("submit", lambda s: Call("counterexample_submit", attack))

    def tell(s: Scratch) -> Call | None:
        got = flow.data(s, "submit")
        if not isinstance(got, dict) or "id" not in got:
            return None
        text = f"Counterexample {got['id']} against {kernel} at {sha[:10]}: large logits; harness to judge."
        thread = {"reply_to": event["message_id"]} if event.get("message_id") else {}
        return Call("chat_post", {"channel": "general", "text": text, **thread})

    flow.add("tell", tell)
    return flow.steps


def coverage_verdict(pr: dict[str, Any]) -> tuple[str, str]:
    """(APPROVED | REQUEST_CHANGES | WAIT, why) from the gateway's per-kernel evidence in ``pr_view``:
    approve only when every kernel the PR changes passed a job at the head on every required check, so
    that a job id for another file, another sha or another task never talks the reviewer into it."""
    gate = pr.get("gate") or {}
    kernels = gate.get("kernels") or []
    if gate.get("blocked_paths"):
        return "REQUEST_CHANGES", "; ".join(b["why"] for b in gate["blocked_paths"])
    if not kernels:
        return "WAIT", "the PR changes no kernel (kernels/<task>/<file>.py)"
    failed = [c["message"] for k in kernels for c in k.get("checks") or [] if c["state"] == "failure"]
    if failed:
        return "REQUEST_CHANGES", "; ".join(failed)
    open_checks = [c["message"] for k in kernels for c in k.get("checks") or [] if c["state"] != "success"]
    if open_checks or not all(k.get("checks") for k in kernels):
        return "WAIT", "; ".join(open_checks) or "no verification is required here"
    jobs = sorted(
        {j["id"] for k in kernels for c in k["checks"] for j in c["jobs"] if j["verdict"] == "pass"}
    )
    return "APPROVED", f"{len(kernels)} kernel(s), passing job(s) {', '.join(jobs)}"


def rev_decide(policy: DemoPolicy, event: dict[str, Any]) -> list[Step]:
    """The author says a job finished: approve only what the gateway's evidence shows verified."""
    found = REVIEW_PING_RE.search(event.get("text", ""))
    assert found is not None
    number, job_id = int(found.group(1)), found.group(2)
    flow = Flow()
    flow.add("view", lambda s: Call("pr_view", {"number": number, "repo": policy.repo, "diff": True}))
    flow.add("job", lambda s: Call("job_status", {"id": job_id}))

    def facts(s: Scratch) -> tuple[dict[str, Any], dict[str, Any]] | None:
        pr, job = flow.data(s, "view"), flow.data(s, "job")
        if not (isinstance(pr, dict) and isinstance(job, dict)) or pr.get("state") != "open":
            return None
        return pr, job

    def review(s: Scratch) -> Call | None:
        got = facts(s)
        if not got:
            return None
        pr, job = got
        head = str(pr.get("head_sha"))
        verdict, why = coverage_verdict(pr)
        if verdict == "APPROVED":
            body = f"Every changed kernel passed verification at {head[:10]} ({why}). Approving this head."
        elif verdict == "REQUEST_CHANGES":
            cited = f" Job {job_id}: {flags_text(job)}." if job.get("sha") == head else ""
            body = (
                f"Not verified at {head[:10]}: {why}.{cited} Please fix the kernel and verify the new head."
            )
        else:
            text = f"Waiting before I review {head[:10]}: {why}."
            return Call("pr_comment", {"number": number, "body": text, "repo": policy.repo})
        args = {"number": number, "event": verdict, "body": body, "head_sha": head, "repo": policy.repo}
        return Call("pr_review", args)

    def tell(s: Scratch) -> Call | None:
        got, done = facts(s), flow.data(s, "review")
        if not got or not isinstance(done, dict) or "state" not in done:
            return None
        pr, job = got
        if done["state"] == "APPROVED":
            text = f"Approved PR #{number} at {str(pr.get('head_sha'))[:10]}: job {job_id} passed."
            thread = {"reply_to": event["message_id"]} if event.get("message_id") else {}
            return Call("chat_post", {"channel": "reviews", "text": text, **thread})
        text = (
            f"@{pr.get('author')} changes requested on PR #{number}: job {job_id} flagged {flags_text(job)}. "
            "Push a fix and verify the new head."
        )
        return Call("chat_post", {"channel": "reviews", "text": text})

    flow.add("review", review)
    flow.add("tell", tell)
    return flow.steps


# -- lead ---------------------------------------------------------------------------------------


def lead_kickoff(policy: DemoPolicy, event: dict[str, Any]) -> list[Step]:
    """The operator's kick-off: post each task on the board, then tell the team in #general."""
    text = event.get("text", "")
    tasks, devs, revs = (names_after(text, label) for label in ("Tasks", "Developers", "Reviewers"))
    flow = Flow([need_identity])
    for i, task in enumerate(tasks):
        info = catalogue.task_info(task)
        description = (
            f"{info.description}\n\nTask file: tasks/{task}/task.py (entry `{info.entry}`). "
            f"Put the kernel in kernels/{task}/<you>_<variant>.py on a branch <you>/{task}, verify it with "
            f'job_submit(task="{task}", ...) on the {policy.pool} pool, and open a PR.'
        )
        args = {"id": task, "title": info.title, "description": description, "labels": [info.category]}

        def post(s: Scratch, args: dict[str, Any] = args) -> Call:
            return Call("task_post", args)

        flow.add(f"post{i}", post)

    def announce(s: Scratch) -> Call | None:
        team = " ".join(f"@{d}" for d in devs) or "@all"
        reviewers = " ".join(f"@{r}" for r in revs) or "a reviewer"
        text = (
            f"{team}: {len(tasks)} kernel tasks are on the board for {policy.repo}. Tasks: "
            f"{', '.join(tasks)}. Take one at a time with task_claim, push to <you>/<task>, open a PR asking "
            f"{reviewers} for review, and verify its head with job_submit on the {policy.pool} pool. "
            "Reviewers approve only what a job verified."
        )
        return Call("chat_post", {"channel": "general", "text": text})

    flow.add("announce", announce)
    reply = f"Posted {len(tasks)} tasks on the board and told the team in #general."
    flow.add("reply", lambda s: Call("chat_post", {"to": event.get("sender", ""), "text": reply}))
    return flow.steps


# -- the table ----------------------------------------------------------------------------------


def demo_rules(policy: DemoPolicy, role: str) -> dict[str, Rule]:
    """The rule table for one agent of the given role (the scripted defaults answer everything else)."""
    base = default_rules()

    def on_dm(event: dict[str, Any]) -> list[Step]:
        text = str(event.get("text", ""))
        if role == "lead" and KICKOFF_RE.match(text):
            return lead_kickoff(policy, event)
        if JOB_DM_RE.match(text):
            return dev_job_result(policy, event) if role == "developer" else []
        return base["dm"](event)

    def on_mention(event: dict[str, Any]) -> list[Step]:
        text = str(event.get("text", ""))
        if role == "red-team" and ATTACK_RE.search(text):
            return red_attack(policy, event)
        if role == "developer" and CHANGES_RE.search(text):
            return dev_fix(policy, event)
        if role == "developer" and "task_claim" in text:
            return dev_start(policy, event)
        if role == "reviewer" and REVIEW_PING_RE.search(text):
            return rev_decide(policy, event)
        return base["mention"](event)

    def on_notice(event: dict[str, Any]) -> list[Step]:
        text = str(event.get("text", ""))
        if role == "developer" and event.get("sender") == "gate" and MERGED_RE.search(text):
            return dev_merged(policy, event)
        if role == "developer" and event.get("sender") == "gate" and WITHDRAWN_RE.search(text):
            return dev_withdrawn(policy, event)
        if role == "reviewer" and REVIEW_REQUEST_RE.search(text):
            return rev_look(policy, event)
        return []

    return {"dm": on_dm, "mention": on_mention, "notice": on_notice}
