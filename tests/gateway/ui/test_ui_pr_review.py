"""The PR page fit for reviewing kernels (issue 24): diffs unified by default with a side-by-side toggle
that needs no reload, new files as plain code, each kernel file with its verification evidence beside it,
and job ids, shas and PRs linking to each other (PR page → jobs and commits, job page → the PR it
verified). Attack: a kernel file whose path and content are HTML/JS renders inert in every view."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from git_kit import open_demo_pr
from jobs_kit import PR_KERNEL, REPO, JobsUiGateway, Worker, result_record, trial
from playwright.sync_api import expect
from ui_kit import browser_page, shot

from gateway.ui.render import Renderer
from kstest.jobkit import git
from kstest.waiting import wait_for

PAGE = {"Accept": "text/html"}
BRANCH = "dev-1/softmax"
# A path git takes as it is (no quoting for < > ' ="), and a content that would close the code cell.
EVIL_PATH = "kernels/softmax/x</pre><script>window.__pwned=1</script>.py"
EVIL_TEXT = (
    "# </pre></td></tr></table><script>window.__pwned = 2</script>\n"
    'y = "<img src=x onerror=window.__pwned=3>"\n'
)


@dataclass
class ReviewedPr:
    number: int
    head: str
    job: str  # a failed cpu job on PR_KERNEL at the head


def pr_view(gw: JobsUiGateway, number: int) -> dict[str, Any]:
    with gw.client(gw.operator_token) as op:
        reply = op.get(f"/api/forge/repos/{REPO}/pulls/{number}")
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def reviewed_pr(gw: JobsUiGateway, tmp: Path) -> ReviewedPr:
    """The demo PR (a new kernel), then a second push that changes the kernel and adds the hostile file;
    a cpu job on the kernel at that head fails one of its two trials."""
    dev = gw.add_principal("dev-1")
    number = open_demo_pr(gw, tmp, dev)
    with gw.client(gw.operator_token) as op:
        reply = op.put(
            f"/api/forge/repos/{REPO}/policy",
            json={"required_approvals": 0, "required_checks": ["kswarm/verify:cpu"]},
        )
    assert reply.status_code == 200, reply.text
    work, ident = tmp / "pr-work", (dev, "dev-1", f"dev-1@agents.{gw.swarm}")
    kernel = work / PR_KERNEL
    kernel.write_text(kernel.read_text().replace("tl.arange(0, 1024)", "tl.arange(0, 2048)"))
    (work / EVIL_PATH).parent.mkdir(parents=True, exist_ok=True)
    (work / EVIL_PATH).write_text(EVIL_TEXT)
    git(tmp / "git-home", *ident, "add", "-A", cwd=work)
    git(tmp / "git-home", *ident, "commit", "-q", "-m", "softmax: 2048 lanes", cwd=work)
    git(tmp / "git-home", *ident, "push", "-q", "origin", BRANCH, cwd=work)
    head = git(tmp / "git-home", *ident, "rev-parse", "HEAD", cwd=work).strip()
    wait_for(lambda: pr_view(gw, number).get("head_sha") == head, what="the PR's head moved")
    with gw.client(dev) as agent:
        reply = agent.post("/api/jobs", json={"repo": REPO, "kernel": PR_KERNEL, "ref": BRANCH})
    assert reply.status_code == 201, reply.text
    worker = Worker(gw, gw.add_principal("w-cpu", "worker"))
    job, attempt = worker.take("cpu", "local", [0, 1])
    failing = {**trial(1, False, ["mismatch"], "output 0: 17 mismatched"), "atol": 1e-4, "rtol": 1e-4}
    record = result_record(
        "softmax",
        PR_KERNEL,
        "cpu",
        "fail",
        reasons=["trial 1: 17 mismatched"],
        flags=["mismatch"],
        trials=[trial(0, True), failing],
    )
    worker.finish(job, attempt, "fail", record, "verdict: fail (mismatch)\n")
    return ReviewedPr(number, head, job)


def file_block(html: str, section_id: str, path_attr: str) -> str:
    """The HTML of one file (``data-path``) inside the diff with ``section_id``."""
    section = html[html.index(f'id="{section_id}"') :]
    start = section.rindex('<div class="sd-file', 0, section.index(f'data-path="{path_attr}"'))
    end = section.find('<div class="sd-file', start + 1)
    return section[start : end if end > 0 else len(section)]


def test_the_pr_page_for_review_and_the_links_between_jobs_shas_and_prs(
    jobs_ui: JobsUiGateway, short_tmp: Path
) -> None:
    gw = jobs_ui
    pr = reviewed_pr(gw, short_tmp)
    wait_for(
        lambda: any(
            j.get("id") == pr.job
            for k in pr_view(gw, pr.number)["gate"]["kernels"]
            for c in k["checks"]
            for j in c["jobs"]
        ),
        what="the gate binds the job to the kernel",
    )
    with gw.login() as browser:
        html = browser.get(f"/ui/prs/{REPO}/{pr.number}", headers=PAGE).text
        split = browser.get(f"/ui/prs/{REPO}/{pr.number}?view=split", headers=PAGE).text
        job_page = browser.get(f"/ui/jobs/{pr.job}", headers=PAGE).text
        commit_page = browser.get(f"/ui/commit/{REPO}/{pr.head}?view=split", headers=PAGE).text
        listing = browser.get("/ui/prs", headers=PAGE).text
        jobs_list = browser.get("/ui/jobs", headers=PAGE).text
    # Unified by default; ?view=split opens side by side, and the toggle says which is shown.
    assert '<div class="diffview" data-view="unified" id="pr-diff">' in html
    assert '<div class="diffview" data-view="split" id="pr-diff">' in split
    assert re.search(r'data-diff-view="unified" class="active" aria-pressed="true"', html)
    assert re.search(r'data-diff-view="split" class="active" aria-pressed="true"', split)
    assert 'class="diffview" data-view="split"' in commit_page, "the commit page has the toggle too"
    # The whole PR: the kernel is a new file, shown as its code (no +/- columns) with the evidence beside.
    new = file_block(html, "pr-diff", PR_KERNEL)
    assert "new-file" in new and "sd-code" in new and "sd-unified" not in new and "sd-split" not in new
    assert ">new file<" in new
    box = new[new.index('<aside class="kernel-evidence">') :]
    assert f'<a href="/ui/jobs/{pr.job}" class="ref ref-job">' in box
    assert '<span class="verdict v-bad">fail</span>' in box
    assert '<span class="flag flag-fail">mismatch</span>' in box
    assert "2 trials, 1 failed" in box
    assert "<code>n=2000</code> float32" in box, "the failing case's shape and dtype"
    assert "atol 0.0001 · rtol 0.0001" in box, "and its tolerance"
    # The push that changed the kernel: a modified file, in both tables (the toggle switches them).
    push = html[html.index(f'id="push-{pr.head[:10]}"') : html.index('id="pr-diff"')]
    assert f'data-path="{PR_KERNEL}" data-status="modified"' in push
    assert "sd-unified" in push and "sd-split" in push and "kernel-evidence" in push
    # Links: the head's sha to its commit, the gate's check to the job, the gate history's heads.
    assert f'href="/ui/commit/{REPO}/{pr.head}" class="ref ref-sha"' in html
    gate_box = html[html.index('id="gate-kernels"') : html.index("</table>", html.index('id="gate-kernels"'))]
    assert f'href="/ui/jobs/{pr.job}"' in gate_box
    reasons = html[html.index('id="gate-reasons"') : html.index("</ul>", html.index('id="gate-reasons"'))]
    assert f'href="/ui/jobs/{pr.job}" class="ref ref-job"' in reasons, "a reason's job links to it"
    assert f'href="/ui/commit/{REPO}/{pr.head[:10]}" class="ref ref-sha"' in reasons, "and its head sha"
    # The job page: its commit and the PR it verified (head = the job's sha, the PR changes its kernel).
    assert f'href="/ui/commit/{REPO}/{pr.head}" class="ref ref-sha" id="job-commit"' in job_page
    prs = job_page[job_page.index('id="job-prs"') : job_page.index("</td>", job_page.index('id="job-prs"'))]
    assert f'href="/ui/prs/kswarm/kernels/{pr.number}" class="ref ref-pr"' in prs
    assert "an earlier head" not in prs
    assert "tolerance atol 0.0001 · rtol 0.0001" in job_page
    # The PR list's gate reasons and the job page's reasons and error link the failed job and the head.
    assert f'href="/ui/jobs/{pr.job}" class="ref ref-job"' in listing
    reasons_box = job_page[
        job_page.index('id="job-reasons"') : job_page.index("</ul>", job_page.index('id="job-reasons"'))
    ]
    assert "trial 1: 17 mismatched" in reasons_box
    # The jobs list: each job's sha links to its commit.
    assert f'href="/ui/commit/{REPO}/{pr.head}" class="ref ref-sha"' in jobs_list
    # The commit page: the PR whose head it is and the jobs run at it.
    links = commit_page[
        commit_page.index('id="commit-links"') : commit_page.index(
            "</table>", commit_page.index('id="commit-links"')
        )
    ]
    assert f'href="/ui/prs/kswarm/kernels/{pr.number}" class="ref ref-pr"' in links
    assert f'href="/ui/jobs/{pr.job}" class="ref ref-job"' in links
    # Attack: the hostile path and content are text in every view and in the highlighted code.
    for page in (html, split, commit_page):
        assert "<script>window.__pwned" not in page and "<img src=x" not in page
        assert "&lt;/pre&gt;&lt;script&gt;window.__pwned=1&lt;/script&gt;.py" in page
        assert "&lt;script&gt;" in page and "onerror" in page


def test_a_job_on_an_older_head_links_to_its_pr_as_an_earlier_head(
    jobs_ui: JobsUiGateway, short_tmp: Path
) -> None:
    gw = jobs_ui
    dev = gw.add_principal("dev-1")
    number = open_demo_pr(gw, short_tmp, dev)
    first = pr_view(gw, number)["head_sha"]
    with gw.client(dev) as agent:
        reply = agent.post("/api/jobs", json={"repo": REPO, "kernel": PR_KERNEL, "ref": BRANCH})
    assert reply.status_code == 201, reply.text
    job = reply.json()["id"]
    work, ident = short_tmp / "pr-work", (dev, "dev-1", f"dev-1@agents.{gw.swarm}")
    (work / PR_KERNEL).write_text((work / PR_KERNEL).read_text() + "# v2\n")
    git(short_tmp / "git-home", *ident, "commit", "-q", "-am", "v2", cwd=work)
    git(short_tmp / "git-home", *ident, "push", "-q", "origin", BRANCH, cwd=work)
    wait_for(lambda: pr_view(gw, number)["head_sha"] != first, what="the head moved")
    with gw.login() as browser:
        page = browser.get(f"/ui/jobs/{job}", headers=PAGE).text
        pr_page = browser.get(f"/ui/prs/{REPO}/{number}", headers=PAGE).text
    # No job at the new head yet: the kernel's box says so instead of showing nothing.
    assert "no job on this file at this head yet" in file_block(pr_page, "pr-diff", PR_KERNEL)
    prs = page[page.index('id="job-prs"') : page.index("</td>", page.index('id="job-prs"'))]
    assert f'href="/ui/prs/kswarm/kernels/{number}"' in prs and "an earlier head" in prs


def test_the_diff_toggle_and_the_evidence_in_chromium(
    jobs_ui: JobsUiGateway, chromium: Path, short_tmp: Path
) -> None:
    gw = jobs_ui
    pr = reviewed_pr(gw, short_tmp)
    with browser_page(gw) as page:
        page.goto(f"{gw.url}/ui/prs/{REPO}/{pr.number}")
        push = page.locator(f"#push-{pr.head[:10]}")
        modified = push.locator(f'.sd-file[data-path="{PR_KERNEL}"]')
        expect(modified.locator("table.sd-unified")).to_be_visible()
        expect(modified.locator("table.sd-split")).to_be_hidden()
        expect(page.locator("#pr-diff .new-file table.sd-code").first).to_be_visible()
        # The evidence sits beside the kernel's code, not under it.
        evidence = page.locator(f'#pr-diff .sd-file[data-path="{PR_KERNEL}"] .kernel-evidence')
        expect(evidence).to_contain_text("mismatch")
        code = page.locator(f'#pr-diff .sd-file[data-path="{PR_KERNEL}"] table.sd-code')
        code_box, evidence_box = code.bounding_box(), evidence.bounding_box()
        assert code_box and evidence_box and evidence_box["x"] >= code_box["x"] + code_box["width"] - 1
        shot(page, "pr-review", full_page=True)
        # Side by side without a reload; the choice is shown and kept in the address.
        page.evaluate("window.__sameDocument = true")
        page.locator('a[data-diff-view="split"]').first.click()
        expect(modified.locator("table.sd-split")).to_be_visible()
        expect(modified.locator("table.sd-unified")).to_be_hidden()
        expect(page.locator('a[data-diff-view="split"]').first).to_have_class(re.compile(r"\bactive\b"))
        assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
        assert "view=split" in page.url
        shot(page, "pr-review-split")
        # Nothing from the hostile file ran or became markup, in either view.
        assert page.evaluate("window.__pwned") is None
        assert page.locator(".diffview script, .diffview img").count() == 0
        expect(page.locator(f'.sd-file[data-path="{EVIL_PATH}"] .sd-head code').first).to_have_text(EVIL_PATH)
        # Links: the evidence's job → the job page → the PR it verified.
        evidence.locator(f'a[href="/ui/jobs/{pr.job}"]').click()
        page.wait_for_url(re.compile(rf".*/ui/jobs/{pr.job}$"))
        page.locator(f'#job-prs a[href="/ui/prs/kswarm/kernels/{pr.number}"]').click()
        page.wait_for_url(re.compile(rf".*/ui/prs/kswarm/kernels/{pr.number}$"))


def test_an_attention_reason_links_its_job_pr_and_sha_and_stays_escaped() -> None:
    item = {
        "key": "job:j0123456789abcdef",
        "kind": "job",
        "severity": "warning",
        "title": "a job failed",
        "since": 0.0,
        "link": "/ui/jobs/j0123456789abcdef",
        "reason": "job j0123456789abcdef at 1a2b3c4d5e of kswarm/kernels#4 failed: <script>alert(1)</script>",
        "actions": [],
    }
    html = Renderer().render("_attention_list.html", report={"items": [item], "sources": {}})
    reason = html[html.index('<div class="att-reason">') : html.index("</div>", html.index("att-reason"))]
    assert '<a href="/ui/jobs/j0123456789abcdef" class="ref ref-job">' in reason
    assert '<a href="/ui/commit/1a2b3c4d5e" class="ref ref-sha">' in reason
    assert '<a href="/ui/prs/kswarm/kernels/4" class="ref ref-pr">' in reason
    assert "<script>" not in reason and "&lt;script&gt;alert(1)&lt;/script&gt;" in reason
