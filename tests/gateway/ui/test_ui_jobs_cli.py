"""``kswarm job cancel|retry|submit`` against the real job runner (the same operator actions as the job
page's buttons, audited), with their refusals: an agent's token, a malformed id, a job in the wrong
state — each one line and an exit code, nothing done."""

from __future__ import annotations

import json
from pathlib import Path

from jobs_kit import REPO, seed_jobs
from monitor_ui_kit import MonitorUiGateway
from typer.testing import CliRunner

from orchestrator.cli.main import app


def kswarm_job(gw: MonitorUiGateway, token: str, tmp: Path, *argv: str) -> tuple[int, str, str]:
    env = {"KSWARM_URL": gw.url, "KSWARM_TOKEN": token, "KSWARM_HOME": str(tmp / "none"), "COLUMNS": "200"}
    result = CliRunner().invoke(app, ["job", *argv], env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def job(gw: MonitorUiGateway, job_id: str) -> dict:
    with gw.client(gw.operator_token) as op:
        return op.get(f"/api/jobs/{job_id}").json()


def test_cancel_retry_and_submit(mon_ui: MonitorUiGateway, short_tmp: Path, tmp_path: Path) -> None:
    gw, op = mon_ui, mon_ui.operator_token
    seeded = seed_jobs(gw, short_tmp)
    # An agent's token: refused, nothing cancelled.
    code, out, err = kswarm_job(gw, seeded.tokens["dev-1"], tmp_path, "cancel", seeded.queued)
    assert code != 0 and out == "" and err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert job(gw, seeded.queued)["state"] == "queued"
    code, out, err = kswarm_job(gw, op, tmp_path, "cancel", seeded.queued)
    assert code == 0 and f"cancelled job {seeded.queued}" in out, err
    assert job(gw, seeded.queued)["state"] == "cancelled"
    code, _, err = kswarm_job(gw, op, tmp_path, "cancel", seeded.queued)
    assert code != 0 and "already cancelled" in err  # a final job is not cancelled twice
    # Retry a finished job: a new job at the same sha; a running one is refused.
    code, out, err = kswarm_job(gw, op, tmp_path, "retry", seeded.passed, "--json")
    assert code == 0, err
    new = json.loads(out)["data"]["job"]
    old, again = job(gw, seeded.passed), job(gw, new)
    assert new != seeded.passed and (again["sha"], again["kernel"]) == (old["sha"], old["kernel"])
    assert again["submitter"] == "operator"
    code, _, err = kswarm_job(gw, op, tmp_path, "retry", seeded.running)
    assert code != 0 and "only a finished job is requeued" in err
    # Submit as the token's principal.
    code, out, err = kswarm_job(
        gw, seeded.tokens["dev-2"], tmp_path, "submit", "kernels/add/add_masked.py", "--repo", REPO,
        "--ref", old["sha"], "--pool", "cpu", "--json",
    )  # fmt: skip
    assert code == 0, err
    submitted = json.loads(out)
    assert submitted["submitter"] == "dev-2" and submitted["sha"] == old["sha"] and submitted["pool"] == "cpu"
    # Bad input: one line, exit 2.
    for argv in (("cancel", "not-a-job"), ("retry", "j12"), ("submit", "k.py", "--kind", "fast")):
        code, _, err = kswarm_job(gw, op, tmp_path, *argv)
        assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, (argv, err)
    with gw.client(op) as c:
        actions = [(a["action"], a["target"], a["outcome"]) for a in c.get("/api/monitor/actions").json()]
    assert ("job:cancel", seeded.queued, "done") in actions and (
        "job:requeue",
        seeded.passed,
        "done",
    ) in actions


def test_cancel_of_a_running_job_says_it_is_cancelled_and_again_that_it_already_is(
    mon_ui: MonitorUiGateway, short_tmp: Path, tmp_path: Path
) -> None:
    gw, op = mon_ui, mon_ui.operator_token
    seeded = seed_jobs(gw, short_tmp)
    code, out, err = kswarm_job(gw, op, tmp_path, "cancel", seeded.running)
    assert code == 0, err
    assert out.strip().startswith(f"cancelled job {seeded.running} (") and "its worker stops it" in out, out
    assert "now running" not in out
    assert job(gw, seeded.running)["cancel_requested"] is True
    code, out, err = kswarm_job(gw, op, tmp_path, "cancel", seeded.running)
    assert code == 1 and out == "", (out, err)
    assert (
        err.strip()
        == f"error: conflict: job {seeded.running} is already cancelled: its worker is stopping it"
    )
    with gw.client(op) as c:
        cancels = [a for a in c.get("/api/monitor/actions").json() if a["action"] == "job:cancel"]
    assert [a["outcome"] for a in cancels] == ["done"], "the second cancel is not done (nor announced) again"
    # What #ops and the UI say is what happened: cancelled, its worker stopping it -- not "now running".
    assert "it was running; its worker stops it" in cancels[0]["message"], cancels[0]["message"]
    assert "now running" not in cancels[0]["message"]


def test_a_second_cancel_of_a_running_job_through_the_actions_api_is_refused_not_announced(
    mon_ui: MonitorUiGateway, short_tmp: Path
) -> None:
    """The UI's button and any client of ``/api/actions``: the job is already being stopped, so a second
    cancel is a 409 saying so, audited as refused, with no second announcement."""
    gw, op = mon_ui, mon_ui.operator_token
    seeded = seed_jobs(gw, short_tmp)
    with gw.client(op) as c:
        first = c.post(f"/api/actions/jobs/{seeded.running}/cancel")
        assert first.status_code == 200, first.text
        assert "its worker stops it" in first.json()["message"]
        second = c.post(f"/api/actions/jobs/{seeded.running}/cancel")
        assert second.status_code == 409
        assert "cancelled, its worker is stopping it" in second.json()["detail"]
        outcomes = [a["outcome"] for a in c.get("/api/monitor/actions").json() if a["action"] == "job:cancel"]
    assert sorted(outcomes) == ["done", "refused"]
