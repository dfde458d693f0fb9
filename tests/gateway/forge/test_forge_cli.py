"""``kswarm prs`` and ``kswarm pr show|why N`` against a real gateway (typer's runner, real HTTP)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from forgekit import Swarm
from typer.testing import CliRunner

from orchestrator.cli.main import app


def cli(swarm: Swarm, *args: str) -> tuple[int, str]:
    env = {
        "KSWARM_URL": swarm.gw.url,
        "KSWARM_TOKEN": swarm.gw.operator_token,
        "COLUMNS": "200",
        "NO_COLOR": "1",
    }
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.output


def test_prs_show_and_why(swarm: Swarm) -> None:
    covered, uncovered = "kernels/add/alice_k.py", "kernels/softmax/alice_k.py"
    git, repo, _ = swarm.push_branch("alice", "alice/cli", covered, "k\n")
    sha = git.commit(repo, uncovered, "s\n", "a second kernel")
    assert git.push(repo, "alice/cli").returncode == 0
    number = swarm.open_pr("alice", "alice/cli")
    job = swarm.verify(sha, covered, "pass")
    other = swarm.verify(sha, "kernels/relu/alice_k.py", "pass")  # a file the PR does not change
    since = time.time()
    assert swarm.review("bob", number, "REQUEST_CHANGES", "needs a test").status_code == 200
    swarm.wait_decision(number, since, {"changes-requested", "approvals", "kernel-unverified"})

    code, out = cli(swarm, "prs", "--repo", swarm.full)
    assert code == 0, out
    assert f"{swarm.full}#{number}" in out and "requested changes" in out

    code, out = cli(swarm, "pr", "why", str(number), "--repo", swarm.full)
    assert code == 0, out
    assert "BLOCKED" in out
    assert "@bob requested changes" in out and "(changes-requested)" in out
    assert f"{uncovered} on kswarm/verify:cpu at {sha[:10]} has no passing job" in out
    assert "changed kernels:" in out and f"job {job} by @alice: pass" in out
    assert other not in out, "a job on a file the PR does not change is not its evidence"
    assert "recent gate decisions:" in out and "blocked" in out and "after " in out

    code, out = cli(swarm, "pr", "why", str(number), "--repo", swarm.full, "--json")
    data = json.loads(out)
    assert data["gate"]["mergeable"] is False and data["head_sha"] == sha
    states = {k["path"]: k["checks"][0]["state"] for k in data["gate"]["kernels"]}
    assert states == {covered: "success", uncovered: "missing"}

    code, out = cli(swarm, "pr", "show", str(number), "--repo", swarm.full, "--diff")
    assert code == 0, out
    assert "review @bob: REQUEST_CHANGES" in out and "+k" in out

    # merged: why says so
    assert swarm.review("bob", number, "APPROVED").status_code == 200
    swarm.verify(sha, uncovered, "pass")
    swarm.wait_merged(number)
    code, out = cli(swarm, "pr", "why", str(number), "--repo", swarm.full)
    assert code == 0 and "merged by the gate" in out and "merge commit" in out
    assert "approvals counted: @bob" in out, "the approvals of the merging decision, not a re-evaluation"
    # a merged PR is "merged" in every listing, never "closed"
    for state in ("merged", "closed", "all"):
        code, out = cli(swarm, "prs", "--repo", swarm.full, "--state", state, "--json")
        assert code == 0 and [p["state"] for p in json.loads(out) if p["number"] == number] == ["merged"]
    code, out = cli(swarm, "prs", "--repo", swarm.full, "--state", "merged")
    row = next(line for line in out.splitlines() if f"#{number}" in line)
    assert "merged" in row and "closed" not in row, out
    code, out = cli(swarm, "prs", "--repo", swarm.full, "--state", "open", "--json")
    assert number not in [p["number"] for p in json.loads(out)]
    code, out = cli(swarm, "pr", "show", str(number), "--repo", swarm.full)
    assert code == 0 and "merged)" in out.splitlines()[0], out


def test_cli_errors_are_one_line(swarm: Swarm, tmp_path: Path) -> None:
    code, out = cli(swarm, "pr", "why", "999", "--repo", swarm.full)
    assert code == 4 and out.startswith("error: not found: ") and "no PR #999" in out and "(HTTP 404)" in out
    assert len(out.strip().splitlines()) == 1
    code, out = cli(swarm, "pr", "show", "1", "--repo", "badformat")
    assert code == 2 and out.strip() == "error: bad input: --repo is org/name, not 'badformat'"
    result = CliRunner().invoke(
        app, ["prs"], env={"KSWARM_HOME": str(tmp_path), "KSWARM_URL": "", "KSWARM_TOKEN": ""}
    )
    assert result.exit_code == 3 and result.output.startswith("error: no gateway: none is running for ")
