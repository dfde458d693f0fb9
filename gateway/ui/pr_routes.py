"""The PRs panel and one PR: the gate's verdict in words that fit the PR's state, Markdown text, every head
the PR had with the job results on it and the diff of each push, the whole diff (unified, or side by side
with ``?view=split`` or the page's toggle), each kernel file with the verification evidence of its jobs
at that head beside it (``kernel_evidence``), and the operator's review and comment forms
(``/api/actions/prs/...``: audited, CSRF-checked through /ui/api).

Also the resolvers the rendered links point to: ``/ui/pr/<n>`` (the repo that has PR n) and
``/ui/commit/[<org>/<repo>/]<sha>`` (one commit's diff, the jobs run at it and the PRs whose head it is).
"""

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from gateway.errors import GatewayError, NotFound
from gateway.forge.gate.evidence import EVIDENCE_MEANS, evidence_rank
from gateway.forge.gate.policy import ReviewPolicy, operator_approval_counts
from gateway.services import FORGE, FORGE_SETTINGS
from gateway.ui.deps import UiDep, UiSvc
from gateway.ui.internal import InternalApi, has_route, segment
from gateway.ui.job_prs import prs_at_head
from gateway.ui.jobs_routes import summarise
from gateway.ui.kernel_evidence import evidence_by_path
from gateway.ui.push_diffs import DiffBudget, push_diff

FORGE_PULLS = "/api/forge/pulls"
Sha = Annotated[str, Path(pattern=r"^[0-9a-f]{7,40}$")]
Segment = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")]
MAX_PUSHES = 10  # per-push diffs computed for the newest pushes
DIFF_VIEWS = ("unified", "split")


def diff_view(view: str | None) -> str:
    """The diff view a page opens with: unified unless ``?view=split`` asks for side by side."""
    return view if view in DIFF_VIEWS else "unified"


def gate_kernels(gate: dict[str, Any]) -> list[dict[str, Any]]:
    """Per changed kernel: the evidence level its passes prove, the policy's minimum, and each required
    check in the short form its status carries (``pass (cpu-screened): job …``)."""
    out = []
    for kernel in gate.get("kernels") or []:
        have = str(kernel.get("evidence") or "none")
        need = kernel.get("required_evidence")
        checks = kernel.get("checks") or []
        out.append(
            {
                "path": kernel.get("path"),
                "evidence": have,
                "means": EVIDENCE_MEANS.get(have, ""),
                "required": need,
                "ok": need is None or evidence_rank(have) >= evidence_rank(str(need)),
                "insufficient": any(c.get("state") == "insufficient" for c in checks),
                "checks": [
                    {
                        "context": c.get("context"),
                        "state": c.get("state"),
                        "summary": c.get("summary") or "",
                        "jobs": [str(j.get("id")) for j in c.get("jobs") or [] if j.get("id")],
                    }
                    for c in checks
                ],
            }
        )
    return out


def gate_box(pr: dict[str, Any]) -> dict[str, Any]:
    """What the gate box says: merged (by whom, at which head, as which commit), closed, or the verdict;
    and per changed kernel the evidence it has (and, when short, the level required)."""
    box = _gate_state(pr)
    box["kernels"] = gate_kernels(pr.get("gate") or {})
    return box


def _gate_state(pr: dict[str, Any]) -> dict[str, Any]:
    audit = pr.get("audit") or []
    gate = pr.get("gate") or {}
    if pr.get("state") == "merged":
        merged = next((e for e in reversed(audit) if e.get("action") == "merged"), None)
        head = (merged or {}).get("head_sha") or pr.get("head_sha")
        return {
            "state": "merged",
            "label": "merged",
            "css": "st-merged",
            "line": f"merged by the gate at head {str(head or '?')[:10]} as "
            f"{str(pr.get('merge_sha') or '?')[:10]}",
            "approvals": (merged or {}).get("approvals") or gate.get("approvals") or [],
            "human_approvals": (merged or {}).get("human_approvals") or [],
            "reasons": [],
        }
    if pr.get("state") == "closed":
        return {
            "state": "closed",
            "label": "closed",
            "css": "st-closed",
            "line": "closed without merging",
            "approvals": [],
            "human_approvals": [],
            "reasons": [],
        }
    reasons = gate.get("reasons") or []
    blocking = any(r.get("blocking") for r in reasons)
    mergeable = bool(gate.get("mergeable"))
    return {
        "state": "mergeable" if mergeable else ("blocked" if blocking else "waiting"),
        "label": "mergeable" if mergeable else ("blocked" if blocking else "waiting"),
        "css": "st-running" if mergeable else ("st-failed" if blocking else "st-backoff"),
        "line": "every rule holds: the gate merges it on its next event"
        if mergeable
        else ("a rule blocks it" if blocking else "waiting for what is missing"),
        "approvals": gate.get("approvals") or [],
        "human_approvals": gate.get("human_approvals") or [],
        "reasons": reasons,
    }


def pr_heads(pr: dict[str, Any], pushes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every head the PR had, oldest first: its branch's pushes, the gate's decisions, the reviews."""
    seen: dict[str, dict[str, Any]] = {}

    def add(sha: str | None, ts: float, source: str, actor: str = "") -> None:
        if sha and sha not in seen:
            seen[sha] = {"sha": sha, "ts": ts, "source": source, "actor": actor}
        elif sha and ts and ts < seen[sha]["ts"]:
            seen[sha]["ts"] = ts

    for push in pushes:
        add(push.get("sha"), float(push.get("ts") or 0), "push", str(push.get("actor") or ""))
    for entry in pr.get("audit") or []:
        add(entry.get("head_sha"), float(entry.get("ts") or 0), "gate")
    for review in pr.get("reviews") or []:
        add(review.get("commit_id"), float(review.get("submitted") or 0), "review")
    add(pr.get("head_sha"), float("inf"), "head")  # the current head: last, whenever it was first seen
    heads = sorted(seen.values(), key=lambda h: h["ts"])
    for head in heads:
        head["ts"] = head["ts"] if head["ts"] != float("inf") else 0.0
    merge_sha = pr.get("merge_sha")
    return [h for h in heads if h["sha"] != merge_sha]


async def jobs_on(api: InternalApi, repo: str, shas: set[str]) -> dict[str, list[dict[str, Any]]]:
    if not shas or not has_route(api.app, "/api/jobs"):
        return {}
    reply = await api.get("/api/jobs", limit=500)
    out: dict[str, list[dict[str, Any]]] = {}
    for job in reply.json() if reply.ok else []:
        if job.get("repo") == repo and job.get("sha") in shas:
            if job.get("verdict"):  # its result record, for the evidence beside the file (only these)
                got = await api.get(f"/api/jobs/{segment(str(job.get('id')))}")
                job = got.json() if got.ok else job
            out.setdefault(job["sha"], []).append(job)
    return out


async def approval_counts(forge: Any, org: str, repo: str, base: str) -> str:
    """What the operator's approval would count for on this PR (its base branch's policy), said by the
    review form before they approve (and by the action's answer after)."""
    if forge is None or not base:
        return ""
    return operator_approval_counts(await forge.get_protection(org, repo, base) or ReviewPolicy())


router = APIRouter(prefix="/ui")


@router.get("/prs", response_class=HTMLResponse, summary="Pull requests with the gate's verdict")
async def prs(ui: UiSvc, request: Request, user: UiDep, state: str = "all") -> HTMLResponse:
    pulls: list[dict[str, Any]] = []
    error = ""
    available = has_route(request.app, FORGE_PULLS)
    if available:
        reply = await ui.api(user).get(FORGE_PULLS, state=state)
        if reply.ok:
            pulls = reply.json()
        else:
            error = reply.detail
    return ui.page(
        "prs.html", request, user, "prs", available=available, pulls=pulls, error=error, state=state
    )


@router.get("/prs/{org}/{repo}/{number}", response_class=HTMLResponse, summary="One PR, with its diffs")
async def pr(
    ui: UiSvc, request: Request, org: str, repo: str, number: int, user: UiDep, view: str | None = None
) -> HTMLResponse:
    api = ui.api(user)
    path = f"/api/forge/repos/{segment(org)}/{segment(repo)}/pulls/{number}"
    reply = await api.get(path, diff="true")
    if not reply.ok:
        raise GatewayError(reply.detail, reply.status)
    found = reply.json()
    full = f"{org}/{repo}"
    pushes: list[dict[str, Any]] = []
    if has_route(request.app, "/api/monitor/heads"):
        got = await api.get("/api/monitor/heads", repo=full, branch=found.get("head", ""))
        pushes = got.json() if got.ok else []
    heads = pr_heads(found, pushes)
    by_sha = await jobs_on(api, full, {h["sha"] for h in heads})
    forge = ui.ctx.services.find(FORGE)
    budget = DiffBudget.of(ui.ctx.services.find(FORGE_SETTINGS))
    base = found.get("base_sha") or ""
    # The PR's changed kernels get an evidence box even with no job yet (it says so).
    kernels: dict[str, list[dict[str, Any]]] = {
        str(k.get("path")): [] for k in (found.get("gate") or {}).get("kernels") or []
    }
    for i in reversed(range(len(heads))):  # the newest pushes first: they get the page's diff budget
        head = heads[i]
        head["jobs"] = by_sha.get(head["sha"], [])
        head["evidence"] = kernels | evidence_by_path(head["jobs"])
        head["diff"], head["diff_note"] = "", ""
        previous = heads[i - 1]["sha"] if i else None
        head["from"] = previous
        if forge is not None and previous and i >= len(heads) - MAX_PUSHES:
            head["diff"], head["diff_note"] = await push_diff(
                forge, org, repo, previous, head["sha"], budget, base=base or None
            )
        elif not previous:
            head["diff_note"] = f"the first head: the PR's diff from {base[:10] or 'the base'} is below"
    actions: list[dict[str, Any]] = []
    if has_route(request.app, "/api/monitor/actions"):
        got = await api.get("/api/monitor/actions", target=f"{full}#{number}", limit=20)
        actions = got.json() if got.ok else []
    return ui.page(
        "pr.html",
        request,
        user,
        "prs",
        pr=found,
        repo=full,
        org=org,
        name=repo,
        gate=gate_box(found),
        heads=list(reversed(heads)),
        head_evidence=kernels | evidence_by_path(by_sha.get(str(found.get("head_sha") or ""), [])),
        diff_view=diff_view(view),
        operator_actions=actions,
        can_act=has_route(request.app, "/api/actions/prs/{org}/{repo}/{number}/review", "POST"),
        approval_counts=await approval_counts(forge, org, repo, found.get("base") or ""),
    )


@router.get("/pr/{number}", summary="The PR with this number (in the only repo that has it)")
async def find_pr(ui: UiSvc, request: Request, number: int, user: UiDep) -> Response:
    reply = await ui.api(user).get(FORGE_PULLS, state="all")
    pulls = [p for p in (reply.json() if reply.ok else []) if p.get("number") == number]
    repos = sorted({p["repo"] for p in pulls})
    if len(repos) == 1:
        org, name = repos[0].split("/", 1)
        return RedirectResponse(f"/ui/prs/{segment(org)}/{segment(name)}/{number}", status_code=303)
    if not repos:
        raise NotFound(f"no PR #{number} in any repo")
    return ui.page("pick.html", request, user, "prs", number=number, pulls=pulls)


@router.get("/commit/{sha}", summary="A commit, found in the forge's repos")
async def find_commit(ui: UiSvc, sha: Sha, user: UiDep) -> Response:
    forge = ui.ctx.services.find(FORGE)
    if forge is None:
        raise NotFound("no forge is registered with this gateway")
    for info in await forge.list_repos():
        resolved = await _resolve(forge, info.org, info.name, sha)
        if resolved:
            return RedirectResponse(
                f"/ui/commit/{segment(info.org)}/{segment(info.name)}/{resolved}", status_code=303
            )
    raise NotFound(f"no commit {sha} in any repo")


@router.get("/commit/{org}/{repo}/{sha}", response_class=HTMLResponse, summary="One commit's diff")
async def commit(
    ui: UiSvc, request: Request, org: Segment, repo: Segment, sha: Sha, user: UiDep, view: str | None = None
) -> HTMLResponse:
    forge = ui.ctx.services.find(FORGE)
    if forge is None or not hasattr(forge, "get_commit"):
        raise NotFound("this forge cannot show commits")
    full_sha = await _resolve(forge, org, repo, sha)
    if not full_sha:
        raise NotFound(f"no commit {sha} in {org}/{repo}")
    info = await forge.get_commit(org, repo, full_sha)
    parent = info.parents[0] if info.parents else None
    diff, note = ("", "the repository's first commit")
    if parent:
        budget = DiffBudget.of(ui.ctx.services.find(FORGE_SETTINGS))
        diff, note = await push_diff(forge, org, repo, parent, full_sha, budget)
    api = ui.api(user)
    jobs = (await jobs_on(api, f"{org}/{repo}", {full_sha})).get(full_sha, [])
    return ui.page(
        "commit.html",
        request,
        user,
        "prs",
        repo=f"{org}/{repo}",
        commit=info,
        diff=diff,
        note=note,
        diff_view=diff_view(view),
        jobs=sorted((summarise(j) for j in jobs), key=lambda j: -float(j.get("submitted") or 0)),
        prs=await prs_at_head(api, f"{org}/{repo}", full_sha),
    )


async def _resolve(forge: Any, org: str, repo: str, sha: str) -> str | None:
    """The full sha of ``sha`` (a prefix of 7+) in ``org/repo``, or None."""
    resolve = getattr(forge, "resolve_ref", None)
    if resolve is None:
        return None
    try:
        return await resolve(org, repo, sha)
    except GatewayError:
        return None
