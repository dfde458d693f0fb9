"""The Jobs panel over HTTP: depth per pool, running jobs with their devices, results with flags and logs.

The jobs are real: submitted by agents, taken, heartbeaten and finished by a worker principal over the
job runner's REST API (jobs_kit); only the accelerators are made up."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from jobs_kit import EVIL_LOG, JobsUiGateway, seed_jobs
from ui_kit import UiGateway, ui_plugins

from gateway.plugins import without_plugins

HTML = {"Accept": "text/html"}


def row(page: str, attr: str, key: str) -> str:
    """The ``<tr data-<attr>="key">`` row of a page ('' when there is none)."""
    match = re.search(rf'<tr data-{attr}="{re.escape(key)}">(.*?)</tr>', page, re.S)
    return match.group(1) if match else ""


def table(page: str, table_id: str) -> str:
    match = re.search(rf'<table class="grid" id="{table_id}">(.*?)</table>', page, re.S)
    assert match, f"no table #{table_id}"
    return match.group(1)


def test_panel_shows_depth_per_pool_running_devices_and_flagged_results(
    jobs_ui: JobsUiGateway, short_tmp: Path
) -> None:
    jobs = seed_jobs(jobs_ui, short_tmp)
    with jobs_ui.login() as browser:
        reply = browser.get("/ui/jobs")
        assert reply.status_code == 200
        page = reply.text
        # Depth per pool (and what runs where): the npu job waits, the gpu one runs on node0's 4..7.
        npu, gpu = row(page, "pool", "npu-910c"), row(page, "pool", "gpu-h100")
        assert '<td class="num depth">1</td>' in npu and 'dev-2</span> <span class="muted">1 waiting' in npu
        assert '<td class="num depth">0</td>' in gpu and '<td class="num running">1 ' in gpu
        busy = re.findall(r'<span class="dev busy" title="in use">(\d)</span>', gpu)
        assert busy == ["4", "5", "6", "7"], "node0's devices 4..7 are in use, node1's are free"
        assert "<code>node1</code>" in gpu and '<td class="num dead">0</td>' in gpu
        assert 'id="total-queued">1 queued' in page and 'id="total-running">1 running' in page
        # The running job with its node, devices, submitter, source and start time.
        running = row(table(page, "running-table"), "job", jobs.running)
        assert "<code>node0</code>" in running and running.count('class="dev busy"') == 4
        assert 'data-agent="dev-1"' in running and "kswarm/kernels@dev-1/jobs" in running
        assert '<span class="age" title="' in running and "w-gpu/i0" in running
        assert row(table(page, "queued-table"), "job", jobs.queued)
        # Results, newest first, with their verdicts and flags as badges, and a link to the log.
        finished = table(page, "finished-table")
        order = [finished.index(f'data-job="{j}"') for j in (jobs.unverifiable, jobs.passed, jobs.flagged)]
        assert order == sorted(order)
        assert jobs.running not in finished and jobs.queued not in finished
        flagged = row(finished, "job", jobs.flagged)
        assert '<span class="verdict v-bad">fail</span>' in flagged
        assert '<span class="flag flag-fail">mismatch</span>' in flagged
        assert '<span class="flag flag-fail">unwritten_output</span>' in flagged
        assert "232 mismatched" in flagged
        passed = row(finished, "job", jobs.passed)
        assert '<span class="verdict v-ok">pass</span>' in passed and 'class="flag ' not in passed
        assert re.search(r"2\.0\d× vs eager", passed), "geometric mean of 2.19x and 1.90x"
        assert '<span class="verdict v-warn">unverifiable</span>' in row(finished, "job", jobs.unverifiable)
        log_link = re.search(r'<a href="([^"]+)" class="log-link">log</a>', flagged)
        assert log_link and log_link.group(1) == f"/ui/jobs/{jobs.flagged}#log"
        log_page = browser.get(log_link.group(1).split("#")[0])
        assert (
            log_page.status_code == 200 and 'id="log"' in log_page.text and "static gate: ok" in log_page.text
        )
        # The live refresh asks for the panel alone.
        fragment = browser.get("/ui/jobs", params={"fragment": "1"}).text
        assert fragment.lstrip().startswith('<section id="panel" class="jobs" data-refresh="3">')
        assert "<html" not in fragment and jobs.flagged in fragment


def test_results_filter_by_pool_state_and_flags(jobs_ui: JobsUiGateway, short_tmp: Path) -> None:
    jobs = seed_jobs(jobs_ui, short_tmp)
    finals = {jobs.flagged, jobs.passed, jobs.unverifiable}

    def shown(**params: Any) -> set[str]:
        with jobs_ui.client(jobs_ui.operator_token) as op:  # an operator's bearer token works too
            reply = op.get("/ui/jobs", params=params)
        assert reply.status_code == 200, reply.text
        return set(re.findall(r'<tr data-job="(j[0-9a-f]+)">', table(reply.text, "finished-table"))) & finals

    assert shown() == finals
    assert shown(pool="cpu") == {jobs.unverifiable}
    assert shown(pool="gpu-h100") == {jobs.flagged, jobs.passed}
    assert shown(state="succeeded") == {jobs.passed}
    assert shown(state="failed") == {jobs.flagged, jobs.unverifiable}
    assert shown(flagged="1") == {jobs.flagged}
    assert shown(pool="gpu-h100", state="failed", flagged="1") == {jobs.flagged}
    with jobs_ui.client(jobs_ui.operator_token) as op:
        assert op.get("/ui/jobs", params={"state": "bogus"}).status_code == 400
        cpu_only = op.get("/ui/jobs", params={"pool": "cpu"}).text
    assert jobs.running not in table(cpu_only, "running-table"), "the pool filter applies to running jobs"


def test_job_page_shows_fields_result_and_the_log_escaped(jobs_ui: JobsUiGateway, short_tmp: Path) -> None:
    jobs = seed_jobs(jobs_ui, short_tmp)
    with jobs_ui.login() as browser:
        reply = browser.get(f"/ui/jobs/{jobs.flagged}")
        assert reply.status_code == 200
        page = reply.text
        assert "script-src 'self'" in reply.headers["content-security-policy"]
        assert '<span class="st st-failed" id="job-state">failed</span>' in page
        assert '<span class="flag flag-fail">mismatch</span>' in page and "n=1000" in page
        assert "<code>node0</code>" in page and page.count('<span class="dev">') == 4, (
            "devices 0..3, now free"
        )
        log = re.search(r'<pre class="log" id="job-log">(.*?)</pre>', page, re.S)
        assert log, "the log is on the page"
        assert "<script>" not in log.group(1) and "<b>" not in log.group(1)
        assert (
            "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt; &amp; &lt;b&gt;not bold&lt;/b&gt;"
            in log.group(1)
        )
        assert "verdict: fail (mismatch, unwritten_output)" in log.group(1)
        assert "<script>alert" not in page
        # The raw log, through the operator's /ui/api bridge: the bytes as the worker sent them, as text.
        raw = re.search(r'<a href="([^"]+)" class="raw-log"', page)
        assert raw and raw.group(1) == f"/ui/api/jobs/{jobs.flagged}/logs"
        text = browser.get(raw.group(1))
        assert text.status_code == 200 and text.headers["content-type"].startswith("text/plain")
        assert EVIL_LOG in text.text
        # A running job's page refreshes itself and shows the output so far.
        running = browser.get(f"/ui/jobs/{jobs.running}").text
        assert 'data-refresh="3"' in running and "trial 0 of 30" in running and "No result yet." in running
        assert "data-refresh" not in page.split('id="panel"')[1].split(">")[0], "a final job stays put"


def test_unknown_job_is_a_404_page(jobs_ui: JobsUiGateway) -> None:
    with jobs_ui.login() as browser:
        for job_id in ("j18f3a2b4c5d6e7", "not-a-job", "j%3Cscript%3E"):
            reply = browser.get(f"/ui/jobs/{job_id}", headers=HTML)
            assert reply.status_code == 404, (job_id, reply.status_code)
            assert reply.headers["content-type"].startswith("text/html")
            assert 'id="not-found"' in reply.text and "<script>" not in reply.text
            assert '<a href="/ui/jobs">' in reply.text


def test_agent_tokens_are_refused(jobs_ui: JobsUiGateway, short_tmp: Path) -> None:
    jobs = seed_jobs(jobs_ui, short_tmp)
    for name in ("dev-1", "w-gpu"):
        with jobs_ui.client(jobs.tokens[name]) as agent:
            for path in ("/ui/jobs", f"/ui/jobs/{jobs.flagged}"):
                refused = agent.get(path, headers=HTML)
                assert refused.status_code == 403, (name, path)
                assert "mismatch" not in refused.text and jobs.flagged not in refused.text
        with jobs_ui.client(None) as anon:
            login = anon.post("/ui/login", data={"token": jobs.tokens[name]})
        assert login.status_code == 403 and "ks_ui_session" not in login.headers.get("set-cookie", "")
    with jobs_ui.client(None) as nobody:
        assert nobody.get("/ui/jobs").status_code == 401
        assert nobody.get(f"/ui/jobs/{jobs.flagged}", headers=HTML).status_code == 303


def test_without_the_job_runner_the_panel_says_so(clean_redis: str, short_tmp: Path) -> None:
    class NoJobsGateway(UiGateway):
        def plugins(self) -> list[Any]:
            return without_plugins(ui_plugins(), "jobs")

    gw = NoJobsGateway(short_tmp / "home", clean_redis)
    gw.start()
    try:
        with gw.login() as browser:
            page = browser.get("/ui/jobs")
            one = browser.get("/ui/jobs/j18f3a2b4c5d6e7", headers=HTML)
    finally:
        gw.stop()
    assert page.status_code == 200 and 'id="unavailable"' in page.text and "Not available yet" in page.text
    assert "No job runner is registered" in page.text and 'id="pools-table"' not in page.text
    assert one.status_code == 404 and "No job runner is registered" in one.text
