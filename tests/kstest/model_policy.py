"""The model of ``kstest.model_upstream``: what a competent agent of each role does next.

Each request is read like a model reads it -- the system prompt says who the agent is
("You are dev-1, a developer agent ... Your git identity is ..." and its work dir), the last wake
message carries the events (``<events>`` JSON, ``agents.prompt.wake_message``), and the tool calls and
results after it say what has been done in this wake -- and the answer is the next ``tool_use`` a
competent agent of that role would choose, or a closing text. It knows nothing the agent does not
see: no Redis, no files, no gateway; every fact (PR numbers, shas, job ids and verdicts, the diff)
comes from tool results in the conversation, so a broken seam shows up as a flow that stops.

Both runtimes are understood: the kswarm loop (tools ``task_claim``, ``bash``, ``write_file``) and the
Claude Code CLI (``mcp__kswarm__task_claim``, ``Bash``, ``Write`` with an absolute ``file_path``).
A request without the gateway's tools (the CLI's own side requests) gets a short text.

Roles: the **lead** turns an operator's DM ("... add for dev-1, relu for dev-2 ... reviewer: reviewer
... repo kernels/dataset, pool cpu") into ``task_post`` per task and one ``chat_post`` in #general that
@mentions each developer with its task; a **developer** mentioned with a task claims it, clones the
repo over ``$KSWARM_GIT_URL``, branches ``<me>/<task>``, writes its own Triton kernel with the file tool,
commits (the provisioned git identity) and pushes, opens a PR asking the reviewer, submits the verify
job at the pushed sha; on the job's DM it reads the job and its PR and asks the reviewer in #reviews;
on the gate's "merged" notice it marks the task done; the **reviewer** reads the PR with its diff and
the job, and approves the head only when the job passed at that head and the gate's per-kernel
evidence is green (else it comments).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents.prompt import parse_events

MCP_PREFIX = "mcp__kswarm__"
CLAUDE_LOCAL = {"Bash": "bash", "Write": "write_file", "Read": "read_file"}
IDENTITY_RE = re.compile(r"You are (\S+), a (\w+) agent.*?Your git identity is \S+ <([^>]+)>", re.S)
WORK_RE = re.compile(r"Your files live in your work dir (\S+?);")
ASSIGN_RE = re.compile(r"`?(\w+)`? for @?([\w-]*\w)")
TAKE_RE = re.compile(r"@(\S+) please take `(\w+)` \(repo (\S+), pool (\S+), reviewer @(\S+)\)")
JOB_DM_RE = re.compile(r"^job (j[0-9a-f]+) \((\S+), (\S+) @ ([0-9a-f]+), pool (\S+)\): (\w+)")
PING_RE = re.compile(r"(\S+/\S+)#(\d+) .*?job (j[0-9a-f]+)", re.S)
REVIEW_REQUEST_RE = re.compile(r"asks for your review of (\S+?)#(\d+)")
MERGED_RE = re.compile(r"(\S+?)#(\d+) .* merged into (\S+) as ([0-9a-f]+)", re.S)
HEAD_RE = re.compile(r"^HEAD ([0-9a-f]{40})$", re.M)
REMINDER_RE = re.compile(r"\s*<system-reminder>.*?</system-reminder>\s*", re.S)  # Claude Code adds these

# The kernels this "model" writes itself (not the catalogue's reference solutions).
KERNELS = {
    "add": '''"""Elementwise x + y: one masked block of 512 per program."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_block(x_ptr, y_ptr, out_ptr, n, sx, sy, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = idx < n
    x = tl.load(x_ptr + idx * sx, mask=keep)
    tl.store(out_ptr + idx, x + tl.load(y_ptr + idx * sy, mask=keep), mask=keep)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = x.numel()
    add_block[(triton.cdiv(n, 512),)](x, y, out, n, x.stride(0), y.stride(0), BLOCK=512)
    return out
''',
    "relu": '''"""max(x, 0) elementwise, one masked block of 256 per program."""

import torch
import triton
import triton.language as tl


@triton.jit
def relu_block(x_ptr, out_ptr, n, sx, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = idx < n
    x = tl.load(x_ptr + idx * sx, mask=keep)
    tl.store(out_ptr + idx, tl.where(x > 0, x, 0.0), mask=keep)


def relu(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = x.numel()
    relu_block[(triton.cdiv(n, 256),)](x, out, n, x.stride(0), BLOCK=256)
    return out
''',
}


@dataclass(frozen=True)
class Call:
    name: str  # the runtime-neutral name: task_claim, bash, write_file, ...
    input: dict[str, Any]


@dataclass
class Done:
    """One tool call of the current wake and what came back."""

    name: str
    input: dict[str, Any]
    text: str
    is_error: bool

    def data(self) -> Any:
        """The result as JSON; an MCP list result wrapped as ``{"result": [...]}`` (how Claude Code shows
        a tool's structured content) is unwrapped, as the kswarm loop does."""
        try:
            value = json.loads(self.text)
        except ValueError:
            return None
        return value["result"] if isinstance(value, dict) and set(value) == {"result"} else value


@dataclass
class Wake:
    """What the model sees: who it is, the events of this wake and the calls made since."""

    me: str
    role: str
    email: str
    work: str
    claude: bool
    events: list[dict[str, Any]]
    done: list[Done] = field(default_factory=list)


def kind(event: dict[str, Any]) -> str:
    """What woke the agent: dm, mention, reply, notice (the inbox says ``reason``, a wake ``kind``)."""
    return str(event.get("kind") or event.get("reason") or "")


def texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    out = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "text":
            out.append(str(block.get("text", "")))
        elif isinstance(block, dict) and block.get("type") == "tool_result":
            out.extend(texts(block.get("content")))
    return out


def read_wake(body: dict[str, Any]) -> Wake | None:
    """The agent's view of its current wake, or None when this is not an agent's tool-using request."""
    system = "\n".join(texts(body.get("system")))
    who, work = IDENTITY_RE.search(system), WORK_RE.search(system)
    names = {str(t.get("name", "")) for t in body.get("tools") or []}
    if who is None or not any(n.endswith("task_claim") for n in names):
        return None
    wake = Wake(who.group(1), who.group(2), who.group(3), work.group(1) if work else ".", "Bash" in names, [])
    messages = body.get("messages") or []
    start = -1
    for i, message in enumerate(messages):
        if message.get("role") != "user":
            continue
        for text in texts(message.get("content")):
            if (events := parse_events(text)) is not None:
                start, wake.events = i, events
    if start < 0:
        return None
    calls: dict[str, Done] = {}
    for message in messages[start + 1 :]:
        for block in message.get("content") if isinstance(message.get("content"), list) else []:
            if block.get("type") == "tool_use":
                name = CLAUDE_LOCAL.get(block["name"], block["name"].removeprefix(MCP_PREFIX))
                calls[block["id"]] = done = Done(name, dict(block.get("input") or {}), "", False)
                wake.done.append(done)
            elif block.get("type") == "tool_result" and block.get("tool_use_id") in calls:
                done = calls[block["tool_use_id"]]
                text = REMINDER_RE.sub("\n", "\n".join(texts(block.get("content")))).strip()
                done.text, done.is_error = text, bool(block.get("is_error"))
    return wake


# -- the roles' plans: each step sees the wake and returns its call, or None to skip -----------------

Step = Callable[[Wake, dict[str, Done]], Call | None]


def lead_plan(wake: Wake, event: dict[str, Any]) -> list[tuple[str, Step]]:
    text = str(event.get("text", ""))
    if kind(event) != "dm" or " for " not in text:
        return []
    repo = m.group(1) if (m := re.search(r"repo (\S+?)[,.]?(?:\s|$)", text)) else "kswarm/dataset"
    pool = m.group(1) if (m := re.search(r"pool (\w+)", text)) else "cpu"
    reviewer = m.group(1) if (m := re.search(r"[Rr]eviewer:? @?([\w-]+)", text)) else "reviewer"
    pairs = [(t, d) for t, d in ASSIGN_RE.findall(text) if t in KERNELS]
    plan: list[tuple[str, Step]] = []
    for task, _dev in pairs:
        description = f"Write a Triton kernel for `{task}`; verify it with job_submit on the {pool} pool."
        args = {"id": task, "title": f"Triton kernel: {task}", "description": description, "labels": ["k"]}
        plan.append((f"post-{task}", lambda w, d, args=args: Call("task_post", args)))
    asks = " ".join(
        f"@{dev} please take `{task}` (repo {repo}, pool {pool}, reviewer @{reviewer})."
        for task, dev in pairs
    )
    note = " Claim it, push to <you>/<task>, open a PR and verify its head with job_submit."
    plan.append(("announce", lambda w, d: Call("chat_post", {"channel": "general", "text": asks + note})))
    reply = f"Posted {len(pairs)} task(s) and assigned them in #general."
    plan.append(("reply", lambda w, d: Call("chat_post", {"to": str(event.get("sender")), "text": reply})))
    return plan


def developer_start(wake: Wake, event: dict[str, Any]) -> list[tuple[str, Step]]:
    found = next((m for m in TAKE_RE.finditer(str(event.get("text", ""))) if m.group(1) == wake.me), None)
    if kind(event) != "mention" or found is None:
        return []
    _, task, repo, pool, reviewer = found.groups()
    clone, branch = repo.rsplit("/", 1)[-1], f"{wake.me}/{task}"
    kernel = f"kernels/{task}/{wake.me}_triton.py"

    def claimed(d: dict[str, Done]) -> bool:
        got = d["claim"].data() if "claim" in d else None
        return isinstance(got, dict) and got.get("holder") == wake.me

    def pushed(d: dict[str, Done]) -> str | None:
        found = HEAD_RE.findall(d["push"].text) if "push" in d else []
        return found[-1] if found else None

    # One && chain from the work dir each time: a shell that keeps its cwd between calls (Claude Code's
    # Bash) and one that does not (the loop's bash) run it alike, and a failed step stops it.
    where = shlex.quote(f"{wake.work.rstrip('/')}/{clone}")
    checkout = " && ".join(
        [
            f"cd {shlex.quote(wake.work)}",
            f'{{ [ -d {where}/.git ] || git clone -q "$KSWARM_GIT_URL"/{shlex.quote(repo)}.git {where}; }}',
            f"cd {where}",
            "git fetch -q origin",
            f"git checkout -q -B {shlex.quote(branch)} origin/main",
            "git log -1 --format='base %H'",
        ]
    )
    push = " && ".join(
        [
            f"cd {where}",
            f"git add -- {shlex.quote(kernel)}",
            f"git commit -q -m {shlex.quote(f'{task}: Triton kernel by {wake.me}')}",
            f"git push -q -f origin HEAD:refs/heads/{shlex.quote(branch)}",
            'echo "HEAD $(git rev-parse HEAD)"',
        ]
    )
    body = f"`{task}` in `{kernel}`. Verification: job_submit on `{pool}` at the head; result follows."
    pr = {"head": branch, "title": f"{task}: Triton kernel by {wake.me}", "body": body}
    return [
        ("claim", lambda w, d: Call("task_claim", {"id": task})),
        ("checkout", lambda w, d: Call("bash", {"command": checkout}) if claimed(d) else None),
        (
            "write",
            lambda w, d: (
                Call("write_file", {"path": f"{clone}/{kernel}", "content": KERNELS[task]})
                if "checkout" in d and not d["checkout"].is_error
                else None
            ),
        ),
        ("push", lambda w, d: Call("bash", {"command": push}) if "write" in d else None),
        (
            "pr",
            lambda w, d: (
                Call("pr_open", {**pr, "reviewers": [reviewer], "repo": repo}) if pushed(d) else None
            ),
        ),
        (
            "job",
            lambda w, d: (
                Call(
                    "job_submit",
                    {"task": task, "kernel": kernel, "ref": pushed(d), "repo": repo, "pool": pool},
                )
                if pushed(d) and "pr" in d
                else None
            ),
        ),
    ]


def developer_job(wake: Wake, event: dict[str, Any]) -> list[tuple[str, Step]]:
    found = JOB_DM_RE.match(str(event.get("text", "")))
    if kind(event) != "dm" or found is None:
        return []
    job_id, task = found.group(1), found.group(2)

    def repo_of(d: dict[str, Done]) -> str:
        job = d["status"].data() if "status" in d else None
        return str(job.get("repo")) if isinstance(job, dict) else ""

    def mine(d: dict[str, Done]) -> dict[str, Any] | None:
        prs = d["prs"].data() if "prs" in d else None
        return next((p for p in prs or [] if p.get("head") == f"{wake.me}/{task}"), None)

    def view(w: Wake, d: dict[str, Done]) -> Call | None:
        pr = mine(d)
        return Call("pr_view", {"number": pr["number"], "repo": pr["repo"], "diff": False}) if pr else None

    def ask(w: Wake, d: dict[str, Done]) -> Call | None:
        job, pr = (d[k].data() if k in d else None for k in ("status", "view"))
        if not (isinstance(job, dict) and isinstance(pr, dict) and job.get("verdict") == "pass"):
            return None
        if job.get("sha") != pr.get("head_sha"):
            return None  # a job for an older head says nothing about this one
        who = " ".join(f"@{r}" for r in pr.get("requested_reviewers") or [] if r != wake.me)
        text = f"{who} {pr['repo']}#{pr['number']} (`{task}`, head {job['sha'][:10]}): job {job_id} passed."
        return Call("chat_post", {"channel": "reviews", "text": text + " Please review."})

    return [
        ("status", lambda w, d: Call("job_status", {"id": job_id})),
        ("prs", lambda w, d: Call("pr_list", {"repo": repo_of(d), "state": "open", "mine": True})),
        ("view", view),
        ("ask", ask),
    ]


def developer_merged(wake: Wake, event: dict[str, Any]) -> list[tuple[str, Step]]:
    found = MERGED_RE.search(str(event.get("text", "")))
    if event.get("sender") != "gate" or found is None:
        return []
    repo, number = found.group(1), int(found.group(2))

    def finish(w: Wake, d: dict[str, Done]) -> Call | None:
        pr = d["view"].data() if "view" in d else None
        if not isinstance(pr, dict) or pr.get("state") != "merged" or pr.get("author") != wake.me:
            return None
        result = f"{repo}#{number} merged as {str(pr.get('merge_sha'))[:10]}"
        return Call("task_done", {"id": str(pr["head"]).split("/", 1)[-1], "result": result})

    return [
        ("view", lambda w, d: Call("pr_view", {"number": number, "repo": repo, "diff": False})),
        ("done", finish),
    ]


def evidence_green(pr: dict[str, Any]) -> bool:
    """Every kernel the PR changes has every required check passed at the head (``pr_view``'s gate)."""
    kernels = (pr.get("gate") or {}).get("kernels") or []
    checks = [c for k in kernels for c in k.get("checks") or []]
    return (
        bool(kernels)
        and all(k.get("checks") for k in kernels)
        and all(c["state"] == "success" for c in checks)
    )


def reviewer_plan(wake: Wake, event: dict[str, Any]) -> list[tuple[str, Step]]:
    text = str(event.get("text", ""))
    if (asked := REVIEW_REQUEST_RE.search(text)) and kind(event) != "mention":
        repo, number = asked.group(1), int(asked.group(2))
        return [("look", lambda w, d: Call("pr_view", {"number": number, "repo": repo, "diff": True}))]
    ping = PING_RE.search(text)
    if kind(event) != "mention" or ping is None:
        return []
    repo, number, job_id = ping.group(1), int(ping.group(2)), ping.group(3)

    def decide(w: Wake, d: dict[str, Done]) -> Call | None:
        pr, job = (d[k].data() if k in d else None for k in ("view", "job"))
        if not (isinstance(pr, dict) and isinstance(job, dict)) or pr.get("state") != "open":
            return None
        head = str(pr["head_sha"])
        if job.get("verdict") == "pass" and job.get("sha") == head and evidence_green(pr) and pr.get("diff"):
            body = f"Read the diff; job {job_id} passed at {head[:10]} and every changed kernel is verified."
            return Call(
                "pr_review",
                {"number": number, "event": "APPROVED", "body": body, "head_sha": head, "repo": repo},
            )
        why = f"Not yet: job {job_id} is {job.get('state')} at {str(job.get('sha'))[:10]}, head {head[:10]}."
        return Call("pr_comment", {"number": number, "body": why, "repo": repo})

    def tell(w: Wake, d: dict[str, Done]) -> Call | None:
        review = d["review"].data() if "review" in d else None
        if not isinstance(review, dict) or review.get("state") != "APPROVED":
            return None
        reply = {"reply_to": event["message_id"]} if event.get("message_id") else {}
        return Call("chat_post", {"channel": "reviews", "text": f"Approved {repo}#{number}.", **reply})

    return [
        ("view", lambda w, d: Call("pr_view", {"number": number, "repo": repo, "diff": True})),
        ("job", lambda w, d: Call("job_status", {"id": job_id})),
        ("review", decide),
        ("tell", tell),
    ]


PLANS: dict[str, list[Callable[[Wake, dict[str, Any]], list[tuple[str, Step]]]]] = {
    "lead": [lead_plan],
    "developer": [developer_start, developer_job, developer_merged],
    "reviewer": [reviewer_plan],
}


def next_call(wake: Wake) -> Call | None:
    """Replay the wake's plan (one per event) against the calls already made; the first step not yet
    made is the answer. Each plan reads its own steps' results by key (``d``)."""
    made = iter(wake.done)
    for event in wake.events:
        for make in PLANS.get(wake.role, []):
            seen: dict[str, Done] = {}
            for key, step in make(wake, event):
                call = step(wake, seen)
                if call is None:
                    continue
                done = next(made, None)
                if done is None:
                    return call
                seen[key] = done
    return None


def as_tool_use(wake: Wake, call: Call) -> dict[str, Any]:
    """The call in the runtime's own tool names and shapes."""
    if not wake.claude:
        return {"type": "tool_use", "name": call.name, "input": call.input}
    if call.name == "bash":
        return {"type": "tool_use", "name": "Bash", "input": {"command": call.input["command"]}}
    if call.name == "write_file":
        path = f"{wake.work.rstrip('/')}/{call.input['path']}"
        return {
            "type": "tool_use",
            "name": "Write",
            "input": {"file_path": path, "content": call.input["content"]},
        }
    return {"type": "tool_use", "name": MCP_PREFIX + call.name, "input": call.input}
