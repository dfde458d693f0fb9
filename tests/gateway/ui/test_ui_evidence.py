"""The UI shows what each verification proves (issue 22 principle 6): the PR page's gate box per changed
kernel (its level, and the level required when it falls short) and the job page (the job's level)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from git_kit import open_demo_pr
from jobs_kit import PR_KERNEL, REPO, JobsUiGateway, Worker, finish_running, result_record, seed_jobs, trial

PAGE = {"Accept": "text/html"}


def set_policy(gw: JobsUiGateway, **policy: Any) -> None:
    with gw.client(gw.operator_token) as op:
        reply = op.put(f"/api/forge/repos/{REPO}/policy", json={"required_approvals": 0, **policy})
    assert reply.status_code == 200, reply.text


def gate_kernels(gw: JobsUiGateway, number: int) -> list[dict[str, Any]]:
    with gw.client(gw.operator_token) as op:
        return list(op.get(f"/api/forge/repos/{REPO}/pulls/{number}").json()["gate"]["kernels"])


def wait_for_level(gw: JobsUiGateway, number: int, level: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if [k.get("evidence") for k in gate_kernels(gw, number)] == [level]:
            return
        time.sleep(0.2)
    raise AssertionError(f"the gate never saw {level}: {gate_kernels(gw, number)}")


def test_the_gate_box_and_the_job_page_show_the_evidence_level(
    jobs_ui: JobsUiGateway, short_tmp: Path
) -> None:
    gw = jobs_ui
    dev = gw.add_principal("dev-1")
    number = open_demo_pr(gw, short_tmp, dev)
    set_policy(gw, required_checks=["kswarm/verify:cpu"])  # the default minimum: cpu-screened
    seeded = seed_jobs(gw, short_tmp, tokens={"dev-1": dev}, pr=number)
    # A cpu pass whose record has no level (the interpreter's small shapes only, as far as anyone knows).
    with gw.client(dev) as agent:
        reply = agent.post("/api/jobs", json={"repo": REPO, "kernel": PR_KERNEL, "ref": "dev-1/softmax"})
    assert reply.status_code == 201, reply.text
    cpu = Worker(gw, seeded.tokens["w-cpu"])
    job, attempt = cpu.take("cpu", "local", [0, 1])
    cpu.finish(
        job, attempt, "pass", result_record("softmax", PR_KERNEL, "cpu", "pass", trials=[trial(0, True)]), ""
    )
    wait_for_level(gw, number, "cpu-shapes-only")

    with gw.login() as browser:
        page = browser.get(f"/ui/prs/{REPO}/{number}", headers=PAGE).text
        box = page[page.index('id="gate-box"') : page.index("</table>", page.index('id="gate-kernels"'))]
        assert f'data-kernel="{PR_KERNEL}"' in box
        assert '<span class="evidence ev-cpu-shapes-only"' in box
        assert "insufficient: cpu-screened required" in box
        assert "pass (cpu-shapes-only); cpu-screened required" in box
        assert "<code>kernel-evidence</code>" in box, "the blocking reason is listed"
        # The job pages: each job's own level, derived by the gateway.
        levels = {
            job: "cpu-shapes-only",
            seeded.passed: "device-verified",  # gpu-h100 bench pass
            seeded.unverifiable: "unverifiable-on-cpu",
            seeded.flagged: "none",
        }
        for job_id, level in levels.items():
            job_page = browser.get(f"/ui/jobs/{job_id}", headers=PAGE).text
            assert f'<span class="evidence ev-{level}" id="job-evidence"' in job_page, (job_id, level)
            assert 'id="job-evidence-means"' in job_page

    # The reviewer's reproduction passes on the gpu pool; a policy that asks for a device shows it met.
    finish_running(gw, seeded, job=seeded.reproduction)
    set_policy(gw, required_checks=["kswarm/verify:gpu-h100"], min_evidence="device-verified")
    wait_for_level(gw, number, "device-verified")
    with gw.login() as browser:
        page = browser.get(f"/ui/prs/{REPO}/{number}", headers=PAGE).text
        row = page[page.index(f'data-kernel="{PR_KERNEL}"') :].split("</tr>")[0]
        assert '<span class="evidence ev-device-verified"' in row and "(device-verified required)" in row
        assert "pass (device-verified): job" in row
