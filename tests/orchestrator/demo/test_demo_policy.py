"""The demo policy on its own: each role's rules against canned tool results (no gateway)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agents.models.scripted import ScriptedModel
from agents.prompt import wake_message
from gateway.tasks import catalogue
from orchestrator.demo.policy import DemoPolicy, demo_rules

SHA = "a" * 40
FIX = "b" * 40
TOOLS = [
    {"name": n, "description": n, "input_schema": {"type": "object"}}
    for n in (
        "whoami bash write_file chat_post task_list task_claim task_post task_done task_release pr_open "
        "pr_list pr_view pr_review pr_comment job_submit job_status counterexample_submit"
    ).split()
]
POLICY = DemoPolicy(repo="kswarm/dataset", pool="cpu", reviewers=("rev-1",), faulty=frozenset({"softmax"}))
Responder = Callable[[str, dict[str, Any]], Any]


def whoami(name: str) -> dict[str, str]:
    return {"name": name, "kind": "agent", "email": f"{name}@agents.demo"}


async def drive(
    role: str, event: dict[str, Any], respond: Responder, policy: DemoPolicy = POLICY
) -> list[tuple[str, dict[str, Any]]]:
    """Run one wake to the end of the turn; tool results come from ``respond`` (JSON-encoded)."""
    model = ScriptedModel(demo_rules(policy, role))
    messages: list[dict[str, Any]] = [{"role": "user", "content": wake_message([event])}]
    calls = []
    for _ in range(100):
        reply = await model.complete("system", messages, TOOLS, 100)
        messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason != "tool_use":
            return calls
        use = reply.tool_uses()[0]
        calls.append((use["name"], use["input"]))
        answer = respond(use["name"], use["input"])
        text = answer if isinstance(answer, str) else json.dumps(answer)
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": text}]}
        )
    raise AssertionError("the policy did not end its turn")


def names(calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [c[0] for c in calls]


async def test_lead_posts_the_kickoffs_tasks_and_tells_the_team() -> None:
    text = "Kick-off: post these. Tasks: add, softmax. Developers: dev-1, dev-2. Reviewers: rev-1. Go."
    event = {
        "reason": "dm",
        "sender": "operator",
        "channel": "dm:lead:operator",
        "message_id": "1-0",
        "text": text,
    }
    calls = await drive("lead", event, lambda n, i: whoami("lead") if n == "whoami" else {"id": i.get("id")})
    assert names(calls) == ["whoami", "task_post", "task_post", "chat_post", "chat_post"]
    assert [c[1]["id"] for c in calls[1:3]] == ["add", "softmax"]
    assert calls[1][1]["title"] == catalogue.task_info("add").title
    announce = calls[3][1]
    assert (
        announce["channel"] == "general"
        and "@dev-1 @dev-2" in announce["text"]
        and "@rev-1" in announce["text"]
    )
    assert "task_claim" in announce["text"]
    assert calls[4][1]["to"] == "operator"


def developer(claim_fails: set[str], tasks: list[str]) -> Responder:
    def respond(name: str, args: dict[str, Any]) -> Any:
        if name == "whoami":
            return whoami("dev-1")
        if name == "task_list":
            return [{"id": t, "state": "open"} for t in tasks]
        if name == "task_claim":
            if args["id"] in claim_fails:
                return f"Error executing tool task_claim: task {args['id']} is claimed by dev-2 (HTTP 409)"
            return {"id": args["id"], "state": "claimed", "holder": "dev-1"}
        if name == "bash":
            head = FIX if "fix the kernel" in args["command"] else SHA
            return (
                f"HEAD {head}\n\n[exit code 0; 0.1s]"
                if "push" in args["command"]
                else "base x\n[exit code 0; 0.1s]"
            )
        if name == "pr_open":
            return {"number": 5, "head": args["head"], "state": "open"}
        if name == "job_submit":
            return {"id": "j1", "state": "queued", "sha": args["ref"]}
        if name == "pr_view":
            return {"number": 5, "state": "open", "author": "dev-1", "head": "dev-1/softmax", "head_sha": SHA}
        return "ok"

    return respond


async def test_a_developer_losing_a_claim_race_takes_the_next_task_and_ships_the_faulty_kernel_first() -> (
    None
):
    event = {
        "reason": "mention",
        "sender": "lead",
        "channel": "general",
        "message_id": "2-0",
        "text": "@dev-1 go: task_claim",
    }
    calls = await drive("developer", event, developer({"add"}, ["add", "softmax"]))
    expected = "whoami task_list task_claim task_claim bash write_file bash pr_open job_submit chat_post"
    assert names(calls) == expected.split()
    assert [c[1]["id"] for c in calls if c[0] == "task_claim"] == ["add", "softmax"]
    assert "git checkout -q -B dev-1/softmax origin/main" in calls[4][1]["command"]
    write = calls[5][1]
    assert write["path"] == "dataset/kernels/softmax/dev-1_triton.py"
    assert write["content"] == catalogue.wrong_solution_path("softmax").read_text()
    assert "user.email=dev-1@agents.demo" in calls[6][1]["command"]
    assert "refs/heads/dev-1/softmax" in calls[6][1]["command"]
    assert calls[7][1]["reviewers"] == ["rev-1"] and calls[7][1]["head"] == "dev-1/softmax"
    kernel = "kernels/softmax/dev-1_triton.py"
    assert calls[8][1] == {
        "task": "softmax",
        "kernel": kernel,
        "ref": SHA,
        "repo": "kswarm/dataset",
        "pool": "cpu",
    }
    # Deterministic: the same events and results make the same calls.
    assert await drive("developer", event, developer({"add"}, ["add", "softmax"])) == calls


async def test_a_job_result_goes_to_the_pr_and_to_its_reviewer() -> None:
    text = "job j1 (softmax, kernels/softmax/dev-1_triton.py @ aaaaaaaaaa, pool cpu): failed - mismatch"
    event = {
        "reason": "dm",
        "sender": "worker-cpu",
        "channel": "dm:dev-1:worker-cpu",
        "message_id": "3-0",
        "text": text,
    }
    job = {
        "id": "j1",
        "state": "failed",
        "verdict": "fail",
        "sha": SHA,
        "flags": ["mismatch"],
        "reasons": ["20/30 failed"],
    }
    base = developer(set(), [])

    def respond(name: str, args: dict[str, Any]) -> Any:
        if name == "job_status":
            return job
        if name == "pr_list":
            return [{"number": 5, "head": "dev-1/softmax"}, {"number": 4, "head": "dev-2/add"}]
        if name == "pr_view":
            return {
                "number": 5,
                "state": "open",
                "head": "dev-1/softmax",
                "head_sha": SHA,
                "requested_reviewers": ["rev-1"],
            }
        return base(name, args)

    calls = await drive("developer", event, respond)
    assert names(calls) == [
        "whoami",
        "job_status",
        "pr_list",
        "pr_view",
        "pr_comment",
        "chat_post",
        "task_list",
    ]
    ping = calls[5][1]
    assert ping["channel"] == "reviews" and ping["text"].startswith("@rev-1 PR #5")
    assert "job j1 failed" in ping["text"] and "mismatch" in ping["text"]


def coverage(path: str, state: str, job_id: str = "j1", verdict: str | None = "pass") -> dict[str, Any]:
    """One changed kernel as ``pr_view``'s gate section shows it (the gateway's evidence)."""
    jobs = [{"id": job_id, "submitter": "dev-1", "state": "x", "verdict": verdict, "counts": True}]
    check = {
        "context": "kswarm/verify:cpu",
        "state": state,
        "jobs": jobs if verdict else [],
        "message": f"{path}: {state}",
    }
    return {"path": path, "task": path.split("/")[1], "status": "added", "checks": [check]}


def reviewer(job: dict[str, Any], kernels: list[dict[str, Any]] | None = None) -> Responder:
    if kernels is None:
        state = {"pass": "success", "fail": "failure"}.get(str(job.get("verdict")), "missing")
        kernels = [coverage(str(job["kernel"]), state, verdict=job.get("verdict"))]

    def respond(name: str, args: dict[str, Any]) -> Any:
        if name == "pr_view":
            return {
                "number": 5, "state": "open", "author": "dev-1", "repo": "kswarm/dataset", "head_sha": SHA,
                "diff": "+++ b/kernels/softmax/dev-1_triton.py",
                "gate": {"kernels": kernels, "blocked_paths": []},
            }  # fmt: skip
        if name == "job_status":
            return job
        if name == "pr_review":
            return {"id": 1, "state": args["event"], "commit_id": args["head_sha"]}
        return "ok"

    return respond


PING = {
    "reason": "mention",
    "sender": "dev-1",
    "channel": "reviews",
    "message_id": "4-0",
    "text": "@rev-1 PR #5 (`softmax`, head aaaa): job j1 failed",
}
JOB = {
    "id": "j1",
    "repo": "kswarm/dataset",
    "sha": SHA,
    "kernel": "kernels/softmax/dev-1_triton.py",
    "pool": "cpu",
}


async def test_a_reviewer_requests_changes_citing_the_jobs_flags() -> None:
    failed = JOB | {
        "state": "failed",
        "verdict": "fail",
        "flags": ["mismatch"],
        "reasons": ["20/30 trial(s) failed"],
    }
    calls = await drive("reviewer", PING, reviewer(failed))
    assert names(calls) == ["pr_view", "job_status", "pr_review", "chat_post"]
    review = calls[2][1]
    assert review["event"] == "REQUEST_CHANGES" and review["head_sha"] == SHA and "mismatch" in review["body"]
    assert calls[3][1]["text"].startswith("@dev-1 changes requested on PR #5")


async def test_a_reviewer_approves_only_a_passing_job_on_the_head() -> None:
    passed = JOB | {"state": "succeeded", "verdict": "pass", "flags": []}
    calls = await drive("reviewer", PING, reviewer(passed))
    assert names(calls) == ["pr_view", "job_status", "pr_review", "chat_post"]
    assert calls[2][1]["event"] == "APPROVED" and calls[3][1]["reply_to"] == "4-0"
    # a job for another commit proves nothing: the gateway shows the head's kernel as unverified
    stale = reviewer(passed | {"sha": FIX}, [coverage(JOB["kernel"], "missing", verdict=None)])
    assert names(await drive("reviewer", PING, stale)) == ["pr_view", "job_status", "pr_comment"]


async def test_a_reviewer_is_not_talked_into_approving_by_a_job_for_another_file() -> None:
    """The two-kernel trick on the reviewer: the PR changes softmax and add, the author pings with a
    passing job on add; softmax has no passing job at the head, so there is no approval."""
    on_add = JOB | {"kernel": "kernels/add/dev-1_triton.py", "state": "succeeded", "verdict": "pass"}
    kernels = [
        coverage("kernels/add/dev-1_triton.py", "success"),
        coverage("kernels/softmax/dev-1_triton.py", "missing", verdict=None),
    ]
    calls = await drive("reviewer", PING, reviewer(on_add, kernels))
    assert names(calls) == ["pr_view", "job_status", "pr_comment"]
    assert "kernels/softmax/dev-1_triton.py" in calls[2][1]["body"]
    assert all(name != "pr_review" for name, _ in calls)


async def test_changes_requested_make_a_fresh_fixed_commit_and_a_new_job() -> None:
    text = "@dev-1 changes requested on PR #5: job j1 flagged mismatch"
    event = {"reason": "mention", "sender": "rev-1", "channel": "reviews", "message_id": "5-0", "text": text}
    calls = await drive("developer", event, developer(set(), []))
    assert names(calls) == ["whoami", "pr_view", "bash", "write_file", "bash", "job_submit", "pr_comment"]
    assert (
        "git checkout -q -B dev-1/softmax origin/main" in calls[2][1]["command"]
    )  # not on top of the bad one
    assert calls[3][1]["content"] == catalogue.solution_path("softmax").read_text()
    assert "push -q -f" in calls[4][1]["command"]
    assert calls[5][1]["ref"] == FIX


async def test_a_merge_notice_marks_the_task_done() -> None:
    text = (
        '@dev-1 kswarm/dataset#5 "softmax: Triton kernel by dev-1" merged into main as 1234567890 (head aaaa)'
    )
    event = {"reason": "notice", "sender": "gate", "channel": "reviews", "message_id": "6-0", "text": text}

    def respond(name: str, args: dict[str, Any]) -> Any:
        if name == "whoami":
            return whoami("dev-1")
        return {
            "state": "merged",
            "author": "dev-1",
            "head": "dev-1/softmax",
            "base": "main",
            "merge_sha": "c" * 40,
        }

    calls = await drive("developer", event, respond)
    assert names(calls) == ["whoami", "pr_view", "task_done"]
    assert calls[2][1]["id"] == "softmax" and "PR #5 merged into main" in calls[2][1]["result"]
    # Other agents' merges and the gate's other notices wake nobody into action.
    assert await drive("reviewer", event, respond) == []


# -- the red team's loop (issue 27) ----------------------------------------------------------------

RED = DemoPolicy(
    repo="kswarm/dataset",
    pool="cpu",
    reviewers=("rev-1",),
    faulty=frozenset({"softmax"}),
    red_team=("red-1",),
    attack=frozenset({"softmax"}),
)
MERGED_TEXT = (
    '@dev-1 kswarm/dataset#5 "softmax: Triton kernel by dev-1" merged into main as 1234567890 (head aaaa)'
)


def merged_view(name: str, args: dict[str, Any]) -> Any:
    if name == "whoami":
        return whoami("dev-1")
    if name == "task_done":
        return {"id": "softmax", "state": "done"}
    return {"state": "merged", "author": "dev-1", "head": "dev-1/softmax", "base": "main", "head_sha": SHA}


async def test_with_a_red_team_the_fix_is_the_unstable_kernel_and_a_merge_asks_the_red_team() -> None:
    text = "@dev-1 changes requested on PR #5: job j1 flagged mismatch"
    event = {"reason": "mention", "sender": "rev-1", "channel": "reviews", "message_id": "5-0", "text": text}
    calls = await drive("developer", event, developer(set(), []), RED)
    assert calls[3][1]["content"] == catalogue.unstable_solution_path("softmax").read_text()

    notice = {
        "reason": "notice",
        "sender": "gate",
        "channel": "reviews",
        "message_id": "6-0",
        "text": MERGED_TEXT,
    }
    calls = await drive("developer", notice, merged_view, RED)
    assert names(calls) == ["whoami", "pr_view", "task_done", "chat_post"]
    ask = calls[3][1]
    assert ask["channel"] == "general" and ask["text"].startswith(
        "@red-1 merged kernels/softmax/dev-1_triton.py"
    )
    assert f"at {SHA} (PR #5)" in ask["text"]
    # Without a red team nobody is asked, and the fix is the honest kernel (the tests above).
    assert names(await drive("developer", notice, merged_view)) == ["whoami", "pr_view", "task_done"]


async def test_the_red_team_submits_a_counterexample_inside_the_domain_for_an_attacked_task() -> None:
    text = f"@red-1 merged kernels/softmax/dev-1_triton.py at {SHA} (PR #5): please try to break it."
    event = {"reason": "mention", "sender": "dev-1", "channel": "general", "message_id": "7-0", "text": text}
    calls = await drive("red-team", event, lambda n, i: {"id": "cx0123456789ab", "status": "pending"}, RED)
    assert names(calls) == ["counterexample_submit", "chat_post"]
    submitted = calls[0][1]
    assert submitted["kernel"] == "kernels/softmax/dev-1_triton.py" and submitted["sha"] == SHA
    assert submitted["input"]["special"] == ["large"] and submitted["task"] == "softmax"
    assert "cx0123456789ab" in calls[1][1]["text"]
    # A task the red team does not attack makes no call.
    other = {**event, "text": text.replace("softmax", "add")}
    assert await drive("red-team", other, lambda n, i: {}, RED) == []


def regression_pr(paths: list[str], blocked: list[dict[str, str]] | None = None) -> Responder:
    diff = "".join(f"diff --git a/{p} b/{p}\n+{{}}\n" for p in paths)

    def respond(name: str, args: dict[str, Any]) -> Any:
        return {
            "number": 9,
            "state": "open",
            "author": "red-1",
            "head_sha": FIX,
            "diff": diff,
            "gate": {"kernels": [], "blocked_paths": blocked or []},
        }

    return respond


async def test_a_reviewer_approves_a_regression_case_pr_the_gate_does_not_block_and_nothing_else() -> None:
    text = "@rev-1 red-1 asks for your review of kswarm/dataset#9"
    event = {"reason": "notice", "sender": "gate", "channel": "reviews", "message_id": "8-0", "text": text}
    case = "tasks/softmax/regressions/cx0123456789ab.json"
    calls = await drive("reviewer", event, regression_pr([case]), RED)
    assert names(calls) == ["pr_view", "pr_review"]
    assert calls[1][1]["event"] == "APPROVED" and calls[1][1]["head_sha"] == FIX
    blocked = [{"path": case, "why": "not a confirmed counterexample's regression case"}]
    assert names(await drive("reviewer", event, regression_pr([case], blocked), RED)) == ["pr_view"]
    mixed = [case, "kernels/softmax/red-1.py"]
    assert names(await drive("reviewer", event, regression_pr(mixed), RED)) == ["pr_view"]


async def test_a_withdrawn_kernel_gets_the_honest_kernel_in_a_new_pr() -> None:
    text = (
        "@dev-1 withdrawn from the dataset: kernels/softmax/dev-1_triton.py at aaaaaaaaaa fails regression "
        "case cx0123456789ab (found by red-1)"
    )
    event = {"reason": "notice", "sender": "gate", "channel": "reviews", "message_id": "9-0", "text": text}
    calls = await drive("developer", event, developer(set(), []), RED)
    assert names(calls) == ["whoami", "bash", "write_file", "bash", "pr_open", "job_submit", "chat_post"]
    assert calls[2][1]["content"] == catalogue.solution_path("softmax").read_text()
    assert "regression case" in calls[4][1]["title"] and calls[4][1]["head"] == "dev-1/softmax"


def test_the_demo_has_a_red_team_from_five_agents_on() -> None:
    from orchestrator.demo.spec import default_roster

    assert default_roster(4).red_team == () and len(default_roster(4).everyone) == 4
    five = default_roster(5)
    assert (
        five.red_team == ("red-1",) and five.developers == ("dev-1", "dev-2") and five.reviewers == ("rev-1",)
    )


def test_the_demo_waits_until_the_last_counterexample_of_an_attacked_task_was_refused() -> None:
    from orchestrator.demo.flow import finished
    from orchestrator.demo.progress import Snapshot

    done = {"softmax": {"state": "done"}, "add": {"state": "done"}}

    def snap(*statuses: str) -> Snapshot:
        cxs = [{"task": "softmax", "status": s, "created_at": float(i)} for i, s in enumerate(statuses)]
        return Snapshot(tasks=done, prs={5: {"state": "merged"}}, counterexamples=cxs)

    attacked = frozenset({"softmax"})
    assert finished(snap(), ("softmax", "add"))  # no red team: the board and the PRs decide
    assert not finished(snap(), ("softmax", "add"), attacked)  # not attacked yet
    assert not finished(snap("confirmed"), ("softmax", "add"), attacked)  # the heal is under way
    assert not finished(snap("confirmed", "pending"), ("softmax", "add"), attacked)
    assert finished(snap("confirmed", "refused"), ("softmax", "add"), attacked)  # the new kernel stands
